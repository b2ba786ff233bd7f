//! Pipelined persistence (dissertation §10.2.1): a leader may replicate a Ready's entries
//! while its own fsync of them runs, and count its followers' acknowledgements meanwhile, but
//! never its own copy until the driver says it is durable.

mod common;

use common::Cluster;
use tenure_core::message::Body;
use tenure_core::sm::Command;

/// Elects a leader in a 3-node cluster, proposes one entry and hands its Ready's messages to
/// one follower only, leaving the leader's own fsync open; returns (cluster, leader, the
/// follower's answers, the entry's index).
fn one_follower_acknowledges_before_the_leaders_fsync(
    commit_undurable: bool,
) -> (Cluster, u64, Vec<tenure_core::message::Message>, u64) {
    let mut c = Cluster::with_config(3, |cfg| cfg.bugs.commit_undurable = commit_undurable);
    let leader = c.elect();
    let follower = if leader == 1 { 2 } else { 1 };
    let proposed = c
        .node_mut(leader)
        .propose(Command::Grant { ttl_ticks: 100 })
        .expect("leader proposes");
    let ready = c.node_mut(leader).ready();
    assert!(ready.entries.iter().any(|e| e.index == proposed.index));
    // The driver writes, starts the fsync and replicates at once.
    for m in ready.messages.into_iter().filter(|m| m.to == follower) {
        c.node_mut(follower).step(m).expect("valid");
    }
    let mut answers = Vec::new();
    let f = c.node_mut(follower);
    while f.has_ready() {
        let r = f.ready();
        f.advance();
        answers.extend(r.messages.into_iter().filter(|m| m.to == leader));
    }
    assert!(answers
        .iter()
        .any(|m| matches!(m.body, Body::AppendEntriesResponse { success: true, .. })));
    (c, leader, answers, proposed.index)
}

#[test]
fn acknowledgements_count_during_the_fsync_but_the_leaders_own_copy_waits_for_it() {
    let (mut c, leader, answers, index) = one_follower_acknowledges_before_the_leaders_fsync(false);
    for m in answers {
        assert!(c.node_mut(leader).step_while_persisting(m).expect("valid"));
    }
    // One follower's copy and the leader's undurable one are not a majority of disks.
    assert!(c.node(leader).status().commit < index);
    assert!(c.node(leader).status().persisted_index < index);
    c.node_mut(leader).tick_while_persisting();
    assert!(c.node(leader).status().commit < index);
    // The fsync returns: now two of three disks hold it.
    c.node_mut(leader).advance();
    assert!(c.node(leader).status().commit >= index);
    c.node(leader).check_invariants();
}

#[test]
fn the_injected_bug_commits_on_a_minority_of_disks_and_tells_followers_at_once() {
    let (mut c, leader, answers, index) = one_follower_acknowledges_before_the_leaders_fsync(true);
    for m in answers {
        assert!(c.node_mut(leader).step_while_persisting(m).expect("valid"));
    }
    assert!(
        c.node(leader).status().commit >= index,
        "the bug counts the undurable copy"
    );
    assert!(c.node(leader).status().persisted_index < index);
    // The new commit index leaves before the fsync completes.
    let early = c.node_mut(leader).take_early_appends();
    assert!(early.iter().any(|m| matches!(
        m.body,
        Body::AppendEntries { leader_commit, .. } if leader_commit >= index
    )));
    // Nothing not durable is applied, even under the bug.
    assert!(c.node(leader).status().applied < index);
}

#[test]
fn other_messages_wait_for_the_fsync_and_change_nothing() {
    let (mut c, leader, _answers, _index) =
        one_follower_acknowledges_before_the_leaders_fsync(false);
    let before = c.node(leader).status();
    let other = if leader == 3 { 2 } else { 3 };
    // A vote request of a higher term must not be stepped while the leader's Ready is open.
    let vote = tenure_core::message::Message {
        from: other,
        to: leader,
        term: before.term + 1,
        body: Body::RequestVote {
            last_log_index: 0,
            last_log_term: 0,
            transfer: false,
        },
    };
    assert!(!c
        .node_mut(leader)
        .step_while_persisting(vote)
        .expect("valid"));
    assert_eq!(c.node(leader).status(), before);
    // Still the leader of its term, and nothing was produced for the vote.
    assert_eq!(before.role, tenure_core::node::Role::Leader);
    assert!(c.node_mut(leader).take_early_appends().is_empty());
}
