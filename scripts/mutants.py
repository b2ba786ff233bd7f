#!/usr/bin/env python3
"""Hand-made bugs, put into a copy of the code one at a time: does the test suite notice?

Each mutant below is a slip someone could plausibly make in the parts that keep the promise
(consensus, the state machine, the driver's answers, the fencing helpers, the write-ahead
log). For each, this script copies the committed tree (HEAD) to a scratch directory, applies
the one edit, runs the tests of the packages it names, and reports CAUGHT (a test failed or
timed out) or SURVIVED. A survivor is a hole in the tests: write the test that catches it
(and check it does, with `--only ID`), or, if the edit cannot change behaviour or what it
breaks cannot be seen from a test, give the reason in its entry.

    scripts/mutants.py              # every mutant not expected to survive (about an hour)
    scripts/mutants.py --list       # what there is
    scripts/mutants.py --only ID    # one (or several: --only A --only B)
    scripts/mutants.py --all        # those expected to survive too

Exit status 1 if a mutant not expected to survive did, or no longer applies. Not part of
the default test run (it builds and tests once per mutant); it uses its own target
directory next to the shared one. The fencing and client mutants need PostgreSQL, etcd and
ZooKeeper installed, as scripts/test.sh installs them.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

CORE = ["tenure-core", "tenure-driver", "tenure-sim"]
FENCE = ["tenure"]
WAL = ["tenure-wal"]
SERVER = ["tenure-server"]

# (id, packages, file, old, new, why it may survive or None); `old` and `new` may be
# tuples, for a mutant that edits several places of one file. A mutant with a reason is
# expected to survive: it cannot change behaviour (equivalent), or what it breaks cannot be
# seen from inside a test process. It is skipped unless --all or --only names it.
MUTANTS = [
    ("follower-commit-unclamped", CORE, "crates/core/src/raft.rs",
     "self.commit_to(leader_commit.min(last));\n            self.accept_append(from, last, sent_tick);",
     "self.commit_to(leader_commit);\n            self.accept_append(from, last, sent_tick);", None),
    ("follower-commit-unclamped-behind", CORE, "crates/core/src/raft.rs",
     "                self.commit_to(leader_commit.min(last));\n                last",
     "                self.commit_to(leader_commit);\n                last", None),
    ("append-no-prev-term-check", CORE, "crates/core/src/raft.rs",
     "if self.log.term(prev) == Some(prev_term) {", "if self.log.term(prev).is_some() {", None),
    ("stale-term-accepted", CORE, "crates/core/src/raft.rs",
     "} else if m.term < self.term {", "} else if m.term + 1 < self.term {", None),
    ("vote-kept-across-terms", CORE, "crates/core/src/raft.rs",
     "            self.term = term;\n            self.vote = None;", "            self.term = term;", None),
    ("up-to-date-off-by-one", CORE, "crates/core/src/log.rs",
     "index >= self.last_index())", "index + 1 >= self.last_index())", None),
    ("lower-term-entry-matches", CORE, "crates/core/src/log.rs",
     "Some(t) if t == e.term => last_match = e.index,",
     "Some(t) if t <= e.term => last_match = e.index,", None),
    ("majority-even", CORE, "crates/core/src/quorum.rs", "n / 2 + 1", "(n + 1) / 2", None),
    ("commit-any-term", CORE, "crates/core/src/raft.rs",
     "let own_term = self.log.term(candidate) == Some(self.term);",
     "let own_term = self.log.term(candidate).is_some();", None),
    ("match-assumes-all", CORE, "crates/core/src/raft.rs",
     "p.match_index = match_index.min(last_index);", "p.match_index = last_index;", None),
    ("snapshot-keeps-conflicting-log", CORE, "crates/core/src/raft.rs",
     "if self.log.term(index) == Some(snapshot.term) {", "if self.log.term(index).is_some() {", None),
    ("vote-lease-half", CORE, "crates/core/src/raft.rs",
     "self.leader_contact_elapsed_ticks < self.t())",
     "self.leader_contact_elapsed_ticks < self.t() / 2)", None),
    ("reject-hint-skips", CORE, "crates/core/src/raft.rs",
     "                    next = i + 1;", "                    next = i + 2;", None),
    ("prevote-grant-without-log", CORE, "crates/core/src/raft.rs",
     "                    && (self.log.is_up_to_date(last_log_index, last_log_term)\n"
     "                        || self.config.bugs.vote_without_log_check);\n"
     "                let term = if granted",
     "                    && (true\n"
     "                        || self.config.bugs.vote_without_log_check);\n"
     "                let term = if granted", None),
    ("term-start-early", CORE, "crates/core/src/raft.rs",
     "self.term_start_index = index;", "self.term_start_index = index - 1;", None),
    ("leader-grants-vote", CORE, "crates/core/src/raft.rs",
     "                    && self.role != Role::Leader\n", "\n",
     "a leader's vote in its term is its own, so `can_vote` already refuses every other node"),
    ("token-not-bumped-on-handover", CORE, "crates/core/src/sm/machine.rs",
     "    if new_head.is_some() {\n        election.token",
     "    if new_head.is_some() && old_head.is_none() {\n        election.token", None),
    ("transfer-no-new-token", CORE, "crates/core/src/sm/machine.rs",
     "settle_head(name, election, Some(from), index,", "settle_head(name, election, Some(to), index,", None),
    ("retried-campaign-leads", CORE, "crates/core/src/sm/machine.rs",
     "                let leader_token = (position == 0).then_some(election.token);\n                return",
     "                let leader_token = Some(election.token);\n                return", None),
    ("forgotten-seq-reapplied", CORE, "crates/core/src/sm/machine.rs",
     "Some(s) if seq <= s.results_forgotten_upto =>", "Some(s) if seq < s.results_forgotten_upto =>", None),
    ("superseded-off-by-one", CORE, "crates/core/src/sm/machine.rs",
     "if token < latest && !self.bugs.stale_fence_accepted",
     "if token + 1 < latest && !self.bugs.stale_fence_accepted", None),
    ("stale-off-by-one", CORE, "crates/core/src/sm/machine.rs",
     "if current.token > token && !self.bugs", "if current.token > token + 1 && !self.bugs", None),
    ("checkpoint-clamped", CORE, "crates/core/src/sm/machine.rs",
     "session.info.remaining_ticks = *remaining_ticks;",
     "session.info.remaining_ticks = (*remaining_ticks).min(session.info.ttl_ticks);", None),
    ("end-session-stays-queued", CORE, "crates/core/src/sm/machine.rs",
     "            election.queue.remove(position);\n            settle_head(name, election, old_head, index, &mut self.leader_changes);\n        }\n        Ok(Response::Ended",
     "            let _ = position;\n            settle_head(name, election, old_head, index, &mut self.leader_changes);\n        }\n        Ok(Response::Ended", None),
    ("read-index-off-by-one", CORE, "crates/core/src/read.rs",
     "applied >= r.read_index", "applied + 1 >= r.read_index",
     "a leader's commit index counts its own durable entries and it applies after every input, "
     "so when a read arrives its applied index already equals the commit index it records"),
    ("read-before-term-start", CORE, "crates/core/src/read.rs",
     "if complete && confirmed && applied", "if confirmed && applied", None),
    ("confirm-same-tick", CORE, "crates/core/src/lease.rs",
     ".is_some_and(|heard| heard > received_tick)", ".is_some_and(|heard| heard >= received_tick)", None),
    ("grant-coverage-no-extra-tick", CORE, "crates/core/src/lease.rs",
     "                        .insert(*session, proposed + 1 + ttl_ticks);",
     "                        .insert(*session, proposed + ttl_ticks);", None),
    ("ack-coverage-no-extra-tick", CORE, "crates/core/src/lease.rs",
     ".is_some_and(|c| *c >= p.received_tick + 1 + ttl);",
     ".is_some_and(|c| *c >= p.received_tick + ttl);", None),
    ("grant-elsewhere-unpadded", CORE, "crates/core/src/lease.rs",
     "None => self.raise_elsewhere(*session, now + padded(*ttl_ticks, drift)),",
     "None => self.raise_elsewhere(*session, now + *ttl_ticks),", None),
    ("ack-while-expiring", CORE, "crates/core/src/lease.rs",
     "        let ok = !self.expiring.contains(&p.session)\n            && covered",
     "        let ok = covered",
     "both callers already keep sessions being ended away from it: the full pass skips "
     "them before it asks, and the newest keepalive was admitted only if its session was "
     "not being ended (see ack-while-releasing, which removes both guards)"),
    ("ack-while-releasing", CORE, "crates/core/src/lease.rs",
     ("        let ok = !self.expiring.contains(&p.session)\n            && covered",
      "            if sm.session(p.session).is_none() || self.expiring.contains(&p.session) {"),
     ("        let ok = covered",
      "            if sm.session(p.session).is_none() {"), None),
    ("answer-other-term", CORE, "crates/driver/src/lib.rs",
     "Some(a) if a.term == key.1 => {", "Some(a) if a.term >= key.1 => {", None),
    ("forgotten-called-failed", CORE, "crates/driver/src/lib.rs",
     ".is_some_and(|floor| seq > floor)", ".is_some_and(|floor| seq >= floor)", None),
    ("snapshot-edge-superseded", CORE, "crates/driver/src/lib.rs",
     "|| index > snapshot_index {", "|| index >= snapshot_index {", None),
    ("timeout-answered-unavailable", SERVER, "crates/server/src/driver.rs",
     "                Err(Unknown::TimedOut.into())", "                Err(ApiError::Unavailable(why))",
     None),
    ("dropped-reply-answered-shutting-down", SERVER, "crates/server/src/driver.rs",
     "Ok(Err(_)) => Err(Unknown::Stopped.into()),", "Ok(Err(_)) => Err(ApiError::ShuttingDown),",
     "a reply is dropped unanswered only when the driver dies holding the request (a panic, "
     "which ends the process) or never took it (where `shutting down` is even true); no test "
     "can make a driver die holding one"),
    ("sqlite-fence-accepts-stale", FENCE, "crates/client/src/fence/sqlite.rs",
     "    WHERE excluded.token >= tenure_fence.token\";", "    WHERE excluded.token >= 0\";", None),
    ("sqlite-fence-refuses-same-token", FENCE, "crates/client/src/fence/sqlite.rs",
     "    WHERE excluded.token >= tenure_fence.token\";",
     "    WHERE excluded.token > tenure_fence.token\";", None),
    ("postgres-fence-accepts-stale", FENCE, "crates/client/src/fence/postgres.rs",
     "    WHERE EXCLUDED.token >= tenure_fence.token\n    RETURNING token\";",
     "    WHERE EXCLUDED.token >= 0\n    RETURNING token\";", None),
    ("wal-checksum-ignored", WAL, "crates/wal/src/record.rs",
     "if crc != stored_crc {", "if false && crc != stored_crc {", None),
    ("wal-segment-not-synced", WAL, "crates/wal/src/file.rs",
     "        if !self.unsynced {\n            return Ok(());\n        }\n"
     "        let path = self.dir.join(segment_name(self.active_seq));",
     "        if self.unsynced || !self.unsynced {\n            return Ok(());\n        }\n"
     "        let path = self.dir.join(segment_name(self.active_seq));", None),
    ("wal-directory-not-synced", WAL, "crates/wal/src/file.rs",
     "        .and_then(|d| d.sync_all())\n        .map_err(WalError::io(\"fsync directory\", dir))",
     "        .map(|_| ())\n        .map_err(WalError::io(\"fsync directory\", dir))",
     "a directory fsync left out loses a file's name only on power loss, which no test in "
     "a running process can see (it would take a syscall tracer or a crashed machine)"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--all", action="store_true")
    args = ap.parse_args()

    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=True, cwd=os.path.dirname(__file__)).stdout.strip()
    ids = {m[0] for m in MUTANTS}
    unknown = [i for i in args.only if i not in ids]
    if unknown:
        sys.exit(f"mutants: unknown id(s) {', '.join(unknown)}; see --list")
    chosen = [m for m in MUTANTS
              if (m[0] in args.only if args.only else (args.all or m[5] is None))]
    if args.list:
        for mid, pkgs, path, _, _, eq in MUTANTS:
            note = f"  (expected to survive: {eq})" if eq else ""
            print(f"{mid:36} {path}  [{' '.join(pkgs)}]{note}")
        return 0

    target_root = os.environ.get("CARGO_TARGET_DIR",
                                 os.path.expanduser("~/.cache/tenure/target"))
    env = dict(os.environ, CARGO_TARGET_DIR=target_root.rstrip("/") + "-mutants",
               CARGO_INCREMENTAL="0")
    work = tempfile.mkdtemp(prefix="tenure-mutants-")
    survived = []
    try:
        tree = os.path.join(work, "tree")
        subprocess.run(["git", "clone", "-q", repo, tree], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                              capture_output=True, text=True, check=True).stdout.strip()
        print(f"mutants: {len(chosen)} against {head}, one build and test run each", flush=True)

        def run_tests(pkgs):
            # The browser tests check the pages, not these parts, and need node_modules in
            # the tree (scripts/services.sh install-browser): left out.
            cmd = ["cargo", "nextest", "run", "--no-fail-fast", "--failure-output", "never",
                   "--success-output", "never", "--status-level", "fail",
                   "-E", "not (binary(dashboard_browser) | binary(ballot_browser))"]
            for p in pkgs:
                cmd += ["-p", p]
            run = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
            out = run.stdout + run.stderr
            failed = sorted({line.split(")", 1)[-1].strip() for line in out.splitlines()
                             if line.strip().startswith(("FAIL", "TIMEOUT"))})
            broken = "error[E" in out or "could not compile" in out
            return run.returncode, failed, broken

        # A mutant counts as caught only if the same tests pass without it.
        for pkgs in sorted({tuple(m[1]) for m in chosen}):
            code, failed, _ = run_tests(pkgs)
            if code != 0:
                print(f"mutants: the tests of {' '.join(pkgs)} fail without any mutant "
                      f"({'; '.join(failed[:3]) or 'see cargo nextest'}): fix that first")
                return 2
            print(f"mutants: baseline of {' '.join(pkgs)} passes", flush=True)

        for mid, pkgs, path, old, new, eq in chosen:
            file = os.path.join(tree, path)
            with open(file) as f:
                src = f.read()
            # One edit, or several in the same file (tuples of the same length).
            edits = list(zip(old, new)) if isinstance(old, tuple) else [(old, new)]
            stale = [o for o, _ in edits if src.count(o) != 1]
            if stale:
                print(f"{mid}: STALE (its text is not in {path} exactly once):"
                      " update the mutant", flush=True)
                survived.append(mid)
                continue
            mutated = src
            for o, n in edits:
                mutated = mutated.replace(o, n)
            with open(file, "w") as f:
                f.write(mutated)
            started = time.time()
            code, failed, broken = run_tests(pkgs)
            with open(file, "w") as f:
                f.write(src)
            if broken:
                verdict = "DOES NOT BUILD (update the mutant)"
                survived.append(mid)
            elif code != 0:
                verdict = "CAUGHT"
            else:
                verdict = "SURVIVED" + (f" (expected: {eq})" if eq else "")
                if not eq:
                    survived.append(mid)
            took = time.time() - started
            shown = "; ".join(failed[:3]) + (" …" if len(failed) > 3 else "")
            print(f"{mid}: {verdict} in {took:.0f} s{': ' + shown if failed else ''}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if survived:
        print(f"mutants: not caught: {', '.join(survived)}")
        return 1
    print("mutants: every mutant caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
