"""Fencing helpers: make a real store reject the writes of a leader that was replaced.

A :class:`~tenure.Leadership` carries a fencing token that rises with every change of
leader. Checking :meth:`~tenure.Leadership.is_valid` before a write narrows the window in
which a replaced leader acts, but cannot close it: the process may pause between the check
and the write. Only the store can close it, by refusing a write whose token is below the
highest it has accepted, in the same atomic step as the write (DESIGN.md rule 3).

The store keeps one row per protected *resource* (a name the application picks) holding the
highest token accepted for it, its high-water mark; every fenced write runs in one
transaction that first raises the mark, then writes. The scheme, and why each part of it is
there, is the Rust ``tenure::fence`` module's; :mod:`tenure.fence.postgres` runs the same SQL.

An external store only learns a higher token when someone writes one: until the new
leader's first fenced write, it still accepts the old leader's token. So a new leader should
raise the fence of every resource it owns before anything else.
"""
