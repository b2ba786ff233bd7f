//! Behaviour that only shows with many sessions: checkpoints split into bounded entries,
//! snapshots spaced by the size of the state, and expiry that finds the due sessions among
//! many live ones.

mod common;

use std::collections::BTreeSet;

use common::Cluster;
use tenure_core::node::CHECKPOINT_SESSIONS_MAX;
use tenure_core::sm::{Command, Response, SessionId};
use tenure_core::types::{NodeId, Payload};

/// Grant `n` sessions with `ttl_ticks` at `leader`, committing them in batches.
fn grant_many(c: &mut Cluster, leader: NodeId, n: usize, ttl_ticks: u64) -> Vec<SessionId> {
    let mut sessions = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch = left.min(1_000);
        let mut indices = Vec::with_capacity(batch);
        for _ in 0..batch {
            let p = c
                .node_mut(leader)
                .propose(Command::Grant { ttl_ticks })
                .expect("leader accepts");
            indices.push(p.index);
        }
        c.flush();
        c.deliver_all();
        for index in indices {
            let applied = c.applied[&leader]
                .iter()
                .rev()
                .find(|a| a.index == index)
                .expect("grant applied");
            match applied.response {
                Response::Granted { session, .. } => sessions.push(session),
                ref other => panic!("grant answered {other:?}"),
            }
        }
        left -= batch;
    }
    sessions
}

#[test]
fn a_checkpoint_of_more_sessions_than_one_entry_carries_is_split_and_every_keepalive_is_acknowledged(
) {
    let mut c = Cluster::with_config(3, |cfg| cfg.uncommitted_entries_max = 50_000);
    let leader = c.elect();
    let n = 2 * CHECKPOINT_SESSIONS_MAX + 100;
    let sessions = grant_many(&mut c, leader, n, 100_000);
    let first_new = c.node(leader).status().last_index + 1;
    for (tag, s) in sessions.iter().enumerate() {
        c.node_mut(leader)
            .keepalive(*s, tag as u64)
            .expect("leader takes the keepalive");
    }
    c.flush();
    c.deliver_all();
    let interval = c.configs[&leader].lease_checkpoint_ticks;
    c.ticks(interval + 2);

    let checkpoints: Vec<Vec<SessionId>> = c
        .node(leader)
        .log_entries()
        .iter()
        .filter(|e| e.index >= first_new)
        .filter_map(|e| match &e.payload {
            Payload::Command(Command::Checkpoint { remaining }) => {
                Some(remaining.iter().map(|(s, _)| *s).collect())
            }
            _ => None,
        })
        .collect();
    assert!(
        checkpoints.len() >= 3,
        "{} sessions renewed, {} checkpoint entries",
        n,
        checkpoints.len()
    );
    assert!(checkpoints
        .iter()
        .all(|cp| !cp.is_empty() && cp.len() <= CHECKPOINT_SESSIONS_MAX));
    let covered: BTreeSet<SessionId> = checkpoints.iter().flatten().copied().collect();
    assert_eq!(covered, sessions.iter().copied().collect::<BTreeSet<_>>());

    let acked: BTreeSet<u64> = c.acks[&leader].iter().map(|a| a.tag).collect();
    assert_eq!(acked.len(), n, "every keepalive is acknowledged");
}

/// The snapshot indices `id` took while `grants` sessions were granted one by one.
fn snapshots_while_granting(grows: bool, grants: usize) -> Vec<u64> {
    let mut c = Cluster::with_config(3, |cfg| {
        cfg.snapshot_threshold_entries = 10;
        cfg.snapshot_grows_with_state = grows;
    });
    let leader = c.elect();
    let mut seen = Vec::new();
    for _ in 0..grants {
        grant_many(&mut c, leader, 1, 100_000);
        let (index, _) = c.node(leader).snapshot_meta();
        if index != 0 && seen.last() != Some(&index) {
            seen.push(index);
        }
    }
    assert_eq!(
        c.node(leader).state_machine().session_count(),
        grants,
        "every session lives"
    );
    seen
}

#[test]
fn snapshots_space_out_as_the_state_grows_unless_configured_not_to() {
    let grows = snapshots_while_granting(true, 400);
    let fixed = snapshots_while_granting(false, 400);
    assert!(
        fixed.len() >= 30,
        "a fixed threshold of 10 entries snapshots about every 10 grants: {fixed:?}"
    );
    assert!(
        !grows.is_empty() && grows.len() <= 7,
        "growing with the state, the gaps double: {grows:?}"
    );
    for w in grows.windows(2) {
        let (before, after) = (w[0], w[1]);
        assert!(
            after - before >= before / 2,
            "the gap after a snapshot at {before} is at least about the records it held: {grows:?}"
        );
    }
}

#[test]
fn short_sessions_among_many_long_ones_expire_on_time() {
    let mut c = Cluster::new(3);
    let leader = c.elect();
    let long = grant_many(&mut c, leader, 5_000, 1_000_000);
    let short = grant_many(&mut c, leader, 10, 20);
    let long_again = grant_many(&mut c, leader, 100, 1_000_000);
    c.ticks(120);
    for node in c.nodes.values() {
        let sm = node.state_machine();
        assert!(short.iter().all(|s| sm.session(*s).is_none()));
        assert!(long
            .iter()
            .chain(&long_again)
            .all(|s| sm.session(*s).is_some()));
    }
}
