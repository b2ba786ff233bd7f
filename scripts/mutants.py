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
    scripts/mutants.py --by sim     # which tool catches each: sim, model, suite (repeatable)

`--by` names the tools to try, each on its own, and ends with a table of which caught what:
`suite` runs the tests of the mutant's packages (the default); `sim` runs the simulator alone
over seeds 1..2001 with 5 voters and then with 3 (`crates/sim/examples/seeds.rs`, the same
runs as `tenure sim`); `model` runs the bounded model checker alone
(`crates/sim/examples/model.rs`). A mutant whose packages the simulator does not reach
(fencing helpers, the server's API layer, the log's file handling) is `-` for sim and model.

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
# A WAL mutant that the simulator reaches: its disks are the log over an in-memory file system.
WAL_SIM = ["tenure-wal", "tenure-sim"]

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
     "                        || injected!(self.bugs.vote_without_log_check));\n"
     "                let term = if granted",
     "                    && (true\n"
     "                        || injected!(self.bugs.vote_without_log_check));\n"
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
     "                    let leader_token = (position == 0).then_some(election.token);\n                    return",
     "                    let leader_token = Some(election.token);\n                    return", None),
    ("forgotten-seq-reapplied", CORE, "crates/core/src/sm/machine.rs",
     "Some(s) if seq <= s.results_forgotten_upto =>", "Some(s) if seq < s.results_forgotten_upto =>", None),
    ("superseded-off-by-one", CORE, "crates/core/src/sm/machine.rs",
     "if token < latest && !accept_stale",
     "if token + 1 < latest && !accept_stale", None),
    ("stale-off-by-one", CORE, "crates/core/src/sm/machine.rs",
     "if current > token && !accept_stale",
     "if current > token + 1 && !accept_stale", None),
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
    ("postgres-fenced-key-accepts-stale", FENCE, "crates/client/src/backend/postgres.rs",
     "            bound.as_ref().map(|(e, t)| (e.as_str(), *t)),\n            false,",
     "            bound.as_ref().map(|(e, t)| (e.as_str(), *t)),\n            true,", None),
    ("postgres-fenced-key-not-judged", FENCE, "crates/client/src/backend/postgres.rs",
     "let latest = match Pg::judge(&tx, fence.election).await? {",
     "let latest = match Some(()) {",
     "the lapsed holder's own client judges the lease as soon as its lease runs out (its "
     "watcher asks who leads), so in every test the write meets an already judged lease; the "
     "judge inside the write is for a writer that asks nothing first"),
    # etcd's and ZooKeeper's fenced keys commit only while the token's candidacy still leads.
    ("etcd-fenced-key-lead-unchecked", FENCE, "crates/client/src/backend/etcd.rs",
     "Compare::create_revision(lead_key, CompareOp::Equal, token),",
     "Compare::create_revision(lead_key, CompareOp::NotEqual, -1),", None),
    ("zk-fenced-key-lead-unchecked", FENCE, "crates/client/src/backend/zk.rs",
     "multi.add_check_version(&node, lead.version).map_err(map)?;",
     "let _ = (&node, lead.version);", None),
    # Disaster recovery: the token jump of a new generation, and the handshake that keeps
    # generations apart.
    ("generation-token-jump-off", ["tenure-core", "tenure"], "crates/core/src/generation.rs",
     "let sm = sm.into_new_generation(floor);",
     "let sm = sm.into_new_generation(0);", None),
    ("handshake-ignores-generation", ["tenure"], "crates/transport/src/transport.rs",
     'g => format!("{cluster_id}@g{g}"),',
     "_ => cluster_id.to_string(),", None),
    ("wal-checksum-ignored", WAL, "crates/wal/src/record.rs",
     "if crc != stored_crc {", "if false && crc != stored_crc {", None),
    ("wal-segment-not-synced", WAL, "crates/wal/src/file.rs",
     "        if !self.unsynced {\n            return Ok(());\n        }\n"
     "        let path = self.dir.join(segment_name(self.active_seq));",
     "        if self.unsynced || !self.unsynced {\n            return Ok(());\n        }\n"
     "        let path = self.dir.join(segment_name(self.active_seq));", None),
    ("wal-directory-not-synced", WAL, "crates/wal/src/file.rs",
     "        self.fs\n            .sync_dir(&self.dir)\n            .map_err(WalError::io(\"fsync directory\", &self.dir))",
     "        Ok(())",
     "a directory fsync left out loses a file's name only on power loss, which no test in "
     "a running process can see (it would take a syscall tracer or a crashed machine)"),

    # ----- Written before the checkers were strengthened for them, in the classes where
    # hand-made bugs from outside got past the simulator (see --by).
    # --- the leader lease at its edges
    ("lease-one-tick-long", CORE, "crates/core/src/raft/leader.rs",
     "Some(base + self.t() - margin)",
     "Some(base + self.t() + 1 - margin)",
     "equivalent: a lease lasts at most T - m of the leader's ticks after the send it rests on, "
     "a follower refuses votes for at least T - 1 of its own after receiving it, and clocks "
     "differ by less than d, so safety needs m >= 1 + T*d; m = ceil(2*T*d) + 2, so one tick "
     "less (m - 1 = ceil(2*T*d) + 1) still meets it (docs/GUARANTEES.md, the leader lease)"),
    ("lease-valid-through-its-end", CORE, "crates/core/src/raft/leader.rs",
     ".is_some_and(|until| self.now_tick < until)",
     ".is_some_and(|until| self.now_tick <= until)",
     "equivalent: valid through tick U instead of before it is the lease of lease-one-tick-long, "
     "whose argument applies: the margin holds a spare tick beyond what drift and rounding need"),
    ("confirm-while-transferring", CORE, "crates/core/src/lease.rs",
     "    if raft.transfer_sent() {\n        return false;\n    }\n",
     "    if false && raft.transfer_sent() {\n        return false;\n    }\n", None),
    # --- drift margins, deadlines rebuilt after a restart or a snapshot install
    ("skew-rounds-down", CORE, "crates/core/src/drift.rs",
     "product.div_ceil(1_000_000) as u64", "(product / 1_000_000) as u64", None),
    ("holder-margin-one-way", CORE, "crates/core/src/drift.rs",
     "        .saturating_mul(2)\n        .saturating_add(fixed_us)",
     "        .saturating_mul(1)\n        .saturating_add(fixed_us)",
     "equivalent under the stated assumption: two clocks' rates differ by less than d, so over a "
     "TTL they disagree by less than d*TTL, which one drift term covers; the formula takes two "
     "(docs/GUARANTEES.md, the holder's lease), and the simulator keeps every pair of clocks "
     "within d, at the bound in lease-edge seeds. Caught only by breaking the assumption"),
    ("padded-no-rounding-tick", CORE, "crates/core/src/lease.rs",
     "        .saturating_add(drift.skew_over_ticks(ticks.saturating_mul(2)))\n        .saturating_add(1)",
     "        .saturating_add(drift.skew_over_ticks(ticks.saturating_mul(2)))", None),
    ("padded-one-way", CORE, "crates/core/src/lease.rs",
     "drift.skew_over_ticks(ticks.saturating_mul(2))", "drift.skew_over_ticks(ticks)",
     "equivalent under the stated assumption, as holder-margin-one-way: a promise counted on "
     "another leader's clock is off by less than d over its length, which one drift term "
     "covers; the padding takes two"),
    ("reset-deadlines-unpadded", CORE, "crates/core/src/lease.rs",
     ".map(|(s, info)| (s, now + padded(info.remaining_ticks, drift)))",
     ".map(|(s, info)| (s, now + info.remaining_ticks))", None),
    ("keepalive-deadline-no-extra-tick", CORE, "crates/core/src/lease.rs",
     "        self.raise_own(session, raft.term, now + 1 + info.ttl_ticks);",
     "        self.raise_own(session, raft.term, now + info.ttl_ticks);", None),
    ("checkpoint-elsewhere-unpadded", CORE, "crates/core/src/lease.rs",
     "None => self.raise_elsewhere(*s, now + padded(*r, drift)),",
     "None => self.raise_elsewhere(*s, now + *r),", None),
    # --- keepalive streams, bound and rebound
    ("older-keepalive-rebinds", CORE, "crates/core/src/lease.rs",
     "            if current.seq >= bind.seq {\n                return;\n            }",
     "            if current.seq > bind.seq + 1_000_000 {\n                return;\n            }", None),
    ("server-close-releases", CORE, "crates/core/src/lease.rs",
     "let by_client = end == StreamEnd::Client || injected!(raft.bugs.release_on_server_close);",
     "let by_client = true;", None),
    # --- fast election's dial epochs
    ("dial-epoch-ignored", CORE, "crates/core/src/raft.rs",
     "            && dialed_in_epoch == self.follow_epoch\n",
     "            && dialed_in_epoch <= self.follow_epoch\n", None),
    ("closed-leader-any-term", CORE, "crates/core/src/raft.rs",
     "&& self.leader_closed == Some((peer, self.term))",
     "&& self.leader_closed.is_some_and(|(p, _)| p == peer)",
     "equivalent: the dial's epoch stamp already implies it. A refusal counts only if the node's "
     "follow epoch is the one the dial started in, and the epoch moves whenever the (term, "
     "leader) it follows does; so the node followed the peer in the current term from the "
     "dial's start to the refusal, and the peer's process was down in between. The only process "
     "that led this term is then gone (a restarted node leads only later terms, which would "
     "move the epoch), whichever term the remembered close was seen in"),
    # --- transfer
    ("transfer-to-lagging-target", CORE, "crates/core/src/raft.rs",
     "            .is_some_and(|p| p.match_index == self.log.last_index())\n        {\n            self.send_timeout_now(to);",
     "            .is_some_and(|p| p.match_index + 1 >= self.log.last_index())\n        {\n            self.send_timeout_now(to);", None),
    ("transfer-ack-lagging-target", CORE, "crates/core/src/raft.rs",
     "                    .is_some_and(|p| p.match_index == self.log.last_index())\n            {\n                self.send_timeout_now(from);",
     "                    .is_some_and(|p| p.match_index + 1 >= self.log.last_index())\n            {\n                self.send_timeout_now(from);", None),
    # --- progress tracking
    ("acked-tick-goes-back", CORE, "crates/core/src/raft.rs",
     "p.acked_sent_tick = Some(p.acked_sent_tick.map_or(sent_tick, |t| t.max(sent_tick)));",
     "p.acked_sent_tick = Some(sent_tick);",
     "equivalent for safety: a reordered, older acknowledgement can only lower the tick a "
     "peer is known to have heard, which shortens the lease and delays confirmations (the "
     "safe direction); it costs availability, which no checker measures"),
    # --- retries
    ("retry-answered-with-its-own-index", CORE, "crates/driver/src/lib.rs",
     "index: a.first_applied.unwrap_or(a.index),", "index: a.index,",
     "equivalent to the contract: `Outcome::Applied::index` is an index at which the command's "
     "effect is in the log, and by the time the retry's entry applies the first application's "
     "effect is there too; the first index is a courtesy no client relies on"),
    ("retry-reapplied", CORE, "crates/core/src/sm/machine.rs",
     "        if let Some((first, response)) = self.remembered(id) {\n            self.advance_applied(index);\n            return (response, Some(first));\n        }",
     "        if let Some((first, response)) = self.remembered(id).filter(|_| false) {\n            self.advance_applied(index);\n            return (response, Some(first));\n        }", None),
    # --- the IO order of the shared pipeline
    ("pipeline-sends-before-persist", CORE, "crates/driver/src/pipeline.rs",
     "            self.node.early_appends(&mut ready)\n",
     "            Some(std::mem::take(&mut ready.then.messages))\n", None),
    ("pipeline-skips-fsync", CORE, "crates/driver/src/pipeline.rs",
     "            storage.sync()?;\n            written.must_sync = false;",
     "            written.must_sync = false;", None),
    ("pipeline-installs-without-writing-the-snapshot", CORE, "crates/driver/src/pipeline.rs",
     "storage.write(hard_state.as_ref(), snapshot.as_ref(), entries)?;",
     "storage.write(hard_state.as_ref(), None, entries)?;", None),
    ("pipeline-records-snapshot-the-node-dropped", CORE, "crates/driver/src/snapshot.rs",
     "    if node.snapshot_taken(Some(snapshot)) {\n        storage.record_snapshot(written)?;",
     "    if node.snapshot_taken(Some(snapshot)) || true {\n        storage.record_snapshot(written)?;", None),
    # --- the write-ahead log's recovery, through the simulator's disks
    ("wal-replay-skips-truncation", WAL_SIM, "crates/wal/src/replay.rs",
     "        if part.entries_start {\n            if let Some(first) = part.entries.first() {",
     "        if false && part.entries_start {\n            if let Some(first) = part.entries.first() {", None),
    ("wal-replay-first-hard-state-wins", WAL_SIM, "crates/wal/src/replay.rs",
     "        if let Some(hs) = part.hard_state {\n            state.hard_state = hs;\n        }\n    }\n    state.persist_seq = persist.seq;",
     "        if let Some(hs) = part.hard_state.filter(|_| state.hard_state.term == 0) {\n            state.hard_state = hs;\n        }\n    }\n    state.persist_seq = persist.seq;", None),
    ("wal-torn-cut-mid-persist", WAL_SIM, "crates/wal/src/replay.rs",
     "let torn_at = pending.as_ref().map_or(at, |p| p.start);",
     "let torn_at = pending.as_ref().map_or(at, |_| at);", None),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--by", action="append", choices=["suite", "sim", "model"], default=[])
    args = ap.parse_args()
    tools = args.by or ["suite"]

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

        def build_example(name):
            """Builds one of tenure-sim's examples in the tree: (its path, None), or (None,
            whether the mutant broke the build)."""
            build = subprocess.run(["cargo", "build", "-q", "-p", "tenure-sim", "--example",
                                    name], cwd=tree, env=env, capture_output=True, text=True)
            out = build.stdout + build.stderr
            if build.returncode != 0:
                return None, "error[E" in out or "could not compile" in out
            return os.path.join(env["CARGO_TARGET_DIR"], "debug", "examples", name), None

        def run_sim(_pkgs):
            """The simulator alone: seeds 1..2001 with 5 voters, then with 3."""
            binary, broken = build_example("seeds")
            if binary is None:
                return 1, [], broken
            for nodes in ("5", "3"):
                run = subprocess.run([binary, "1..2001", nodes], cwd=tree, env=env,
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    first = (run.stdout.splitlines() or ["a panic"])[0]
                    return 1, [f"{nodes} nodes, {first}"], False
            return 0, [], False

        def run_model(_pkgs):
            """The bounded model checker alone, at the suite's bound."""
            binary, broken = build_example("model")
            if binary is None:
                return 1, [], broken
            run = subprocess.run([binary], cwd=tree, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                last = (run.stdout.strip().splitlines() or ["a panic"])[-1]
                return 1, [last], False
            return 0, [], False

        runners = {"suite": run_tests, "sim": run_sim, "model": run_model}
        reaches = {"suite": lambda pkgs: True,
                   "sim": lambda pkgs: "tenure-sim" in pkgs,
                   "model": lambda pkgs: "tenure-sim" in pkgs}

        # A mutant counts as caught only if the same runs pass without it.
        for tool in tools:
            groups = sorted({tuple(m[1]) for m in chosen if reaches[tool](m[1])})
            # The simulator and the model checker run the same whatever the packages.
            for pkgs in groups if tool == "suite" else groups[:1]:
                code, failed, _ = runners[tool](pkgs)
                if code != 0:
                    print(f"mutants: {tool} over {' '.join(pkgs)} fails without any mutant "
                          f"({'; '.join(failed[:3]) or 'see its output'}): fix that first")
                    return 2
                print(f"mutants: baseline of {tool} over {' '.join(pkgs)} passes", flush=True)

        table = []
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
            row = {}
            try:
                for tool in tools:
                    if not reaches[tool](pkgs):
                        row[tool] = "-"
                        continue
                    started = time.time()
                    code, failed, broken = runners[tool](pkgs)
                    took = time.time() - started
                    if broken:
                        verdict = "DOES NOT BUILD (update the mutant)"
                        row[tool] = "broken"
                    elif code != 0:
                        verdict = "CAUGHT"
                        row[tool] = "caught"
                    else:
                        verdict = "SURVIVED" + (f" (expected: {eq})" if eq else "")
                        row[tool] = "survived"
                    shown = "; ".join(failed[:3]) + (" …" if len(failed) > 3 else "")
                    print(f"{mid}: {tool}: {verdict} in {took:.0f} s"
                          f"{': ' + shown if failed else ''}", flush=True)
            finally:
                with open(file, "w") as f:
                    f.write(src)
            table.append((mid, eq, row))
            tried = [v for v in row.values() if v != "-"]
            if "broken" in tried or (not eq and "caught" not in tried):
                survived.append(mid)

        print("\n| mutant | " + " | ".join(tools) + " |")
        print("|---|" + "---|" * len(tools))
        for mid, eq, row in table:
            note = " (equivalent)" if eq else ""
            print(f"| {mid}{note} | " + " | ".join(row.get(t, "") for t in tools) + " |")
        for tool in tools:
            reached = [r for _, eq, r in table if not eq and r.get(tool, "-") != "-"]
            caught = [r for r in reached if r[tool] == "caught"]
            if reached:
                print(f"mutants: {tool} caught {len(caught)} of the {len(reached)} it reaches "
                      f"({100 * len(caught) // len(reached)} %)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if survived:
        print(f"mutants: not caught: {', '.join(survived)}")
        return 1
    print("mutants: every mutant caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
