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
    let bugs = tenure_core::bugs::InjectedBugs {
        commit_undurable,
        ..Default::default()
    };
    let mut c = Cluster::with_bugs(3, bugs, |_| {});
    let leader = c.elect();
    let follower = if leader == 1 { 2 } else { 1 };
    let proposed = c
        .node_mut(leader)
        .propose(Command::Grant { ttl_ticks: 100 })
        .expect("leader proposes");
    let ready = c.node_mut(leader).ready();
    assert!(ready
        .persist
        .entries
        .iter()
        .any(|e| e.index == proposed.index));
    // The driver writes, starts the fsync and replicates at once.
    for m in ready.then.messages.into_iter().filter(|m| m.to == follower) {
        c.node_mut(follower).step(m).expect("valid");
    }
    let mut answers = Vec::new();
    let f = c.node_mut(follower);
    while f.has_ready() {
        let r = f.ready();
        f.advance();
        answers.extend(r.then.messages.into_iter().filter(|m| m.to == leader));
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

/// Proposals that arrive before the driver takes a Ready leave together: one AppendEntries
/// per follower carrying all of them (up to `append_entries_max`), not one message each.
#[test]
fn proposals_between_two_readies_leave_as_one_append_per_follower() {
    let mut c = Cluster::with_config(3, |cfg| cfg.append_entries_max = 4);
    let leader = c.elect();
    let first = c.node(leader).status().last_index + 1;
    for _ in 0..6 {
        c.node_mut(leader)
            .propose(Command::Grant { ttl_ticks: 100 })
            .expect("leader proposes");
    }
    let ready = c.node_mut(leader).ready();
    assert_eq!(ready.persist.entries.len(), 6);
    for follower in (1..=3).filter(|id| *id != leader) {
        let batches: Vec<(u64, usize)> = ready
            .then
            .messages
            .iter()
            .filter(|m| m.to == follower)
            .filter_map(|m| match &m.body {
                Body::AppendEntries {
                    prev_log_index,
                    entries,
                    ..
                } => Some((*prev_log_index, entries.len())),
                _ => None,
            })
            .collect();
        assert_eq!(
            batches,
            [(first - 1, 4), (first + 3, 2)],
            "follower {follower}: six entries in batches of at most four"
        );
    }
    c.node_mut(leader).advance();
    c.node(leader).check_invariants();
}

/// `Node::early_appends`: of a leader's Ready that appends entries, its AppendEntries may
/// leave before the fsync; a Ready that persists a new term (a candidate's vote request)
/// does not qualify, and nothing is taken from it.
#[test]
fn only_a_leaders_appends_may_leave_before_its_fsync() {
    let mut c = Cluster::new(3);
    let leader = c.elect();
    c.node_mut(leader)
        .propose(Command::Grant { ttl_ticks: 100 })
        .expect("leader proposes");
    let mut ready = c.node_mut(leader).ready();
    let early = c
        .node(leader)
        .early_appends(&mut ready)
        .expect("a leader's append qualifies");
    assert_eq!(early.len(), 2, "one AppendEntries per follower");
    assert!(early
        .iter()
        .all(|m| matches!(m.body, Body::AppendEntries { .. })));
    assert!(ready
        .then
        .messages
        .iter()
        .all(|m| !matches!(m.body, Body::AppendEntries { .. })));
    c.node_mut(leader).advance();

    // A follower that campaigns: its vote requests wait for its term and vote to be durable.
    let follower = if leader == 1 { 2 } else { 1 };
    c.isolate(follower);
    let node = c.node_mut(follower);
    let mut campaigned = None;
    for _ in 0..1_000 {
        node.tick();
        if node.has_ready() {
            let mut ready = node.ready();
            let asks = ready
                .then
                .messages
                .iter()
                .any(|m| matches!(m.body, Body::RequestVote { .. } | Body::PreVote { .. }));
            let before = ready.then.messages.len();
            let early = node.early_appends(&mut ready);
            assert_eq!(ready.then.messages.len(), before, "nothing taken");
            node.advance();
            if asks {
                campaigned = Some(early);
                break;
            }
        }
    }
    assert_eq!(
        campaigned,
        Some(None),
        "a campaign's Ready does not qualify"
    );
}
