//! Tests named after the section of the Raft paper ("In Search of an Understandable Consensus
//! Algorithm", extended version) or of Ongaro's dissertation that they check, in the manner
//! of etcd's `raft_paper_test.go`; plus bad input and configuration rules.
//!
//! Most tests build nodes with pre-vote and check-quorum off, so that what they show is the
//! paper's plain algorithm; the tests of those extensions switch them on.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{disk_with, noops, Disk};
use tenure_core::bugs::InjectedBugs;
use tenure_core::config::{Config, ConfigError};
use tenure_core::drift::DriftPpm;
use tenure_core::message::{Body, Message};
use tenure_core::node::{Node, ProposeError, Ready, Role, Status, StepError};
use tenure_core::sm::{Command, SmLimits, StateMachine};
use tenure_core::types::{Entry, Index, Membership, NodeId, Payload, Recovered, Snapshot, Term};

// ----- helpers -------------------------------------------------------------------------------

/// The paper's Raft: no pre-vote, no check-quorum.
fn plain(id: NodeId, voters: &[NodeId]) -> Config {
    let mut c = Config::new(id, voters.to_vec());
    c.pre_vote = false;
    c.check_quorum = false;
    c
}

/// A node restarted from a disk holding `term`, no vote, and entries with the given terms
/// at indexes 1, 2, ….
fn node_with_log(cfg: Config, term: Term, terms: &[Term]) -> Node {
    let recovered = disk_with(term, None, 0, noops(1, terms));
    Node::new(cfg, recovered).expect("valid node")
}

fn log_terms(n: &Node) -> Vec<Term> {
    n.log_entries().iter().map(|e| e.term).collect()
}

/// Handle every Ready the node has (persisting nothing) and return them.
fn readies(n: &mut Node) -> Vec<Ready> {
    let mut out = Vec::new();
    while n.has_ready() {
        out.push(n.ready());
        n.advance();
        n.check_invariants();
    }
    out
}

/// The messages the node sends now.
fn sent(n: &mut Node) -> Vec<Message> {
    readies(n)
        .into_iter()
        .flat_map(|r| r.then.messages)
        .collect()
}

fn step(n: &mut Node, m: Message) {
    n.step(m).expect("well-formed message");
    n.check_invariants();
}

/// Tick a node until its election timer fires (its term rises, or it becomes pre-candidate).
fn campaign(n: &mut Node) {
    let before = n.status();
    for _ in 0..100 {
        n.tick();
        let now = n.status();
        if now.term > before.term || (now.role != before.role && now.role != Role::Follower) {
            return;
        }
    }
    panic!("node {} never campaigned", n.id());
}

fn request_vote(from: NodeId, to: NodeId, term: Term, last: (Index, Term)) -> Message {
    Message {
        from,
        to,
        term,
        body: Body::RequestVote {
            last_log_index: last.0,
            last_log_term: last.1,
            transfer: false,
        },
    }
}

fn append(
    from: NodeId,
    to: NodeId,
    term: Term,
    prev: (Index, Term),
    entries: Vec<Entry>,
    commit: Index,
) -> Message {
    Message {
        from,
        to,
        term,
        body: Body::AppendEntries {
            prev_log_index: prev.0,
            prev_log_term: prev.1,
            entries,
            leader_commit: commit,
            sent_tick: 0,
        },
    }
}

/// The vote carried by a RequestVoteResponse (or PreVoteResponse) to `to`, if one was sent.
fn vote_reply(msgs: &[Message], to: NodeId) -> Option<(Term, bool)> {
    msgs.iter().find_map(|m| match m.body {
        Body::RequestVoteResponse { granted } | Body::PreVoteResponse { granted } if m.to == to => {
            Some((m.term, granted))
        }
        _ => None,
    })
}

/// The AppendEntriesResponse sent to `to`: (success, match index, conflict index).
fn append_reply(msgs: &[Message], to: NodeId) -> (bool, Index, Option<Index>) {
    msgs.iter()
        .find_map(|m| match &m.body {
            Body::AppendEntriesResponse {
                success,
                match_index,
                hint,
                ..
            } if m.to == to => Some((*success, *match_index, hint.map(|h| h.conflict_index))),
            _ => None,
        })
        .expect("an AppendEntriesResponse")
}

/// A small network of nodes with disks, driven message by message. Messages are delivered
/// only when a test asks, so that it can stage the exact interleavings of the paper.
struct Net {
    nodes: BTreeMap<NodeId, Node>,
    disks: BTreeMap<NodeId, Disk>,
    configs: BTreeMap<NodeId, Config>,
    inflight: Vec<Message>,
}

impl Net {
    fn new(n: u64, tweak: impl Fn(&mut Config)) -> Net {
        let ids: Vec<NodeId> = (1..=n).collect();
        Net::with_voters(n, &ids, tweak)
    }

    /// Nodes 1..=n of which `voters` bootstrap the cluster; the others start empty and learn
    /// the configuration from a leader.
    fn with_voters(n: u64, voters: &[NodeId], tweak: impl Fn(&mut Config)) -> Net {
        let ids: Vec<NodeId> = (1..=n).collect();
        let mut net = Net {
            nodes: BTreeMap::new(),
            disks: BTreeMap::new(),
            configs: BTreeMap::new(),
            inflight: Vec::new(),
        };
        for id in &ids {
            let initial = if voters.contains(id) { voters } else { &[] };
            let mut cfg = plain(*id, initial);
            tweak(&mut cfg);
            net.configs.insert(*id, cfg);
            net.load(*id, Recovered::default());
        }
        net
    }

    /// (Re)start `id` from the given disk contents.
    fn load(&mut self, id: NodeId, recovered: Recovered) {
        let node = Node::new(self.configs[&id].clone(), recovered.clone()).expect("valid node");
        self.nodes.insert(id, node);
        self.disks.insert(id, Disk { recovered });
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }

    fn status(&self, id: NodeId) -> Status {
        self.nodes[&id].status()
    }

    /// Persist and send what every running node has ready.
    fn flush(&mut self) {
        for (id, n) in self.nodes.iter_mut() {
            while n.has_ready() {
                let r = n.ready();
                self.disks.get_mut(id).expect("disk").persist(&r.persist);
                n.advance();
                n.check_invariants();
                self.inflight.extend(r.then.messages);
            }
        }
    }

    /// Deliver, in send order, every message that `pass` lets through, including the replies
    /// they cause, until none is left; other messages stay in flight. `pass` sees each
    /// message once per round, so it may count. Messages to a node that is down are lost.
    fn deliver_if(&mut self, mut pass: impl FnMut(&Message) -> bool) {
        loop {
            self.flush();
            let mut kept = Vec::new();
            let mut delivered = false;
            for m in std::mem::take(&mut self.inflight) {
                if !pass(&m) {
                    kept.push(m);
                    continue;
                }
                delivered = true;
                if let Some(n) = self.nodes.get_mut(&m.to) {
                    n.step(m).expect("well-formed message");
                    n.check_invariants();
                }
                self.flush();
            }
            kept.append(&mut self.inflight);
            self.inflight = kept;
            if !delivered {
                return;
            }
        }
    }

    fn deliver_all(&mut self) {
        self.deliver_if(|_| true);
    }

    /// Lose everything in flight.
    fn drop_all(&mut self) {
        self.flush();
        self.inflight.clear();
    }

    /// Tick every running node `n` times without delivering anything.
    fn tick_all(&mut self, n: u64) {
        for _ in 0..n {
            for node in self.nodes.values_mut() {
                node.tick();
            }
        }
        self.flush();
    }

    /// Tick `id` alone until its election timer fires.
    fn campaign(&mut self, id: NodeId) {
        campaign(self.nodes.get_mut(&id).expect("running"));
        self.flush();
    }

    fn propose(&mut self, id: NodeId, command: Command) -> Index {
        let p = self
            .nodes
            .get_mut(&id)
            .expect("running")
            .propose(command)
            .expect("leader accepts");
        self.flush();
        p.index
    }

    fn crash(&mut self, id: NodeId) {
        self.flush();
        self.nodes.remove(&id);
        self.inflight.retain(|m| m.from != id && m.to != id);
    }

    fn restart(&mut self, id: NodeId) {
        let recovered = self.disks[&id].recovered.clone();
        let node = Node::new(self.configs[&id].clone(), recovered).expect("restart from disk");
        self.nodes.insert(id, node);
    }
}

fn among(ids: &'static [NodeId]) -> impl Fn(&Message) -> bool {
    move |m| ids.contains(&m.from) && ids.contains(&m.to)
}

fn is_vote(m: &Message) -> bool {
    matches!(
        m.body,
        Body::RequestVote { .. } | Body::RequestVoteResponse { .. }
    )
}

fn grant() -> Command {
    Command::Grant { ttl_ticks: 100 }
}

/// Elect `id` in a fresh network: it campaigns and every message is delivered.
fn elect(net: &mut Net, id: NodeId) {
    net.campaign(id);
    net.deliver_all();
    assert_eq!(net.status(id).role, Role::Leader, "{:?}", net.status(id));
}

// ----- §5.1 terms ----------------------------------------------------------------------------

#[test]
fn test_5_1_higher_term_makes_leader_step_down() {
    let mut net = Net::new(3, |_| {});
    elect(&mut net, 1);
    let term = net.status(1).term;
    let leader = net.nodes.get_mut(&1).expect("running");
    step(leader, append(2, 1, term + 1, (1, term), vec![], 1));
    let s = leader.status();
    assert_eq!(s.role, Role::Follower);
    assert_eq!(s.term, term + 1);
    assert_eq!(
        s.leader,
        Some(2),
        "the sender of AppendEntries leads the new term"
    );
    assert_eq!(s.vote, None, "a new term starts without a vote");
}

#[test]
fn test_5_1_candidate_steps_down_on_a_higher_term_reply() {
    let mut n = Node::new(plain(1, &[1, 2, 3]), Recovered::default()).expect("node");
    campaign(&mut n);
    assert_eq!(n.status().role, Role::Candidate);
    let reply = Message {
        from: 2,
        to: 1,
        term: 7,
        body: Body::RequestVoteResponse { granted: false },
    };
    step(&mut n, reply);
    assert_eq!((n.status().role, n.status().term), (Role::Follower, 7));
}

#[test]
fn test_5_1_stale_term_messages_are_refused_with_the_current_term() {
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 3, &[1, 1]);
    let before = n.status();
    step(&mut n, append(1, 2, 2, (2, 1), noops(3, &[2]), 3));
    let msgs = sent(&mut n);
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        msgs[0].term, 3,
        "the reply tells the stale leader about term 3"
    );
    assert!(!append_reply(&msgs, 1).0, "refused");
    assert_eq!(log_terms(&n), vec![1, 1], "stale entries are not stored");
    assert_eq!(n.status().commit, before.commit);
    // A stale vote request gets no vote either.
    step(&mut n, request_vote(3, 2, 2, (9, 2)));
    assert_eq!(n.status().vote, None);
}

// ----- §5.2 leader election ------------------------------------------------------------------

#[test]
fn test_5_2_election_timeout_is_randomized_in_t_to_2t_and_follows_the_seed() {
    let t = Config::new(1, vec![1]).election_timeout_ticks;
    let mut seen = BTreeSet::new();
    for seed in 0..40 {
        let timeout = |seed| {
            let mut cfg = plain(1, &[1, 2, 3]);
            cfg.seed = seed;
            let mut n = Node::new(cfg, Recovered::default()).expect("node");
            let mut ticks = 0;
            while n.status().role == Role::Follower {
                n.tick();
                ticks += 1;
            }
            ticks
        };
        let ticks = timeout(seed);
        assert!(
            (t..=2 * t).contains(&ticks),
            "seed {seed}: fired after {ticks} ticks"
        );
        assert_eq!(ticks, timeout(seed), "seed {seed} is not deterministic");
        seen.insert(ticks);
    }
    assert!(seen.len() >= 5, "timeouts barely vary: {seen:?}");
}

#[test]
fn test_5_2_candidate_votes_for_itself_and_asks_every_voter() {
    let mut n = Node::new(plain(1, &[1, 2, 3]), Recovered::default()).expect("node");
    campaign(&mut n);
    let s = n.status();
    assert_eq!((s.role, s.term, s.vote), (Role::Candidate, 1, Some(1)));
    let mut asked: Vec<NodeId> = sent(&mut n)
        .iter()
        .filter(|m| is_vote(m) && m.term == 1)
        .map(|m| m.to)
        .collect();
    asked.sort_unstable();
    assert_eq!(asked, vec![2, 3]);
}

#[test]
fn test_5_2_candidate_wins_with_a_majority_and_appends_a_noop() {
    let mut n = Node::new(plain(1, &[1, 2, 3, 4, 5]), Recovered::default()).expect("node");
    campaign(&mut n);
    sent(&mut n);
    let grant_from = |from| Message {
        from,
        to: 1,
        term: 1,
        body: Body::RequestVoteResponse { granted: true },
    };
    step(&mut n, grant_from(2));
    assert_eq!(n.status().role, Role::Candidate, "2 of 5 is not a majority");
    step(&mut n, grant_from(3));
    assert_eq!(n.status().role, Role::Leader, "3 of 5 is");
    assert_eq!(
        n.log_entries(),
        &noops(1, &[1])[..],
        "a new leader appends a no-op of its term (§5.4.2, §8)"
    );
}

#[test]
fn test_5_2_candidate_follows_a_leader_of_its_own_term() {
    let mut n = Node::new(plain(1, &[1, 2, 3]), Recovered::default()).expect("node");
    campaign(&mut n);
    step(&mut n, append(2, 1, 1, (0, 0), vec![], 0));
    let s = n.status();
    assert_eq!((s.role, s.term, s.leader), (Role::Follower, 1, Some(2)));
}

#[test]
fn test_5_2_follower_votes_at_most_once_per_term() {
    let mut n = Node::new(plain(3, &[1, 2, 3]), Recovered::default()).expect("node");
    step(&mut n, request_vote(1, 3, 1, (0, 0)));
    assert_eq!(vote_reply(&sent(&mut n), 1), Some((1, true)));
    step(&mut n, request_vote(2, 3, 1, (0, 0)));
    assert_eq!(
        vote_reply(&sent(&mut n), 2),
        Some((1, false)),
        "already voted for 1 in term 1"
    );
    step(&mut n, request_vote(1, 3, 1, (0, 0)));
    assert_eq!(
        vote_reply(&sent(&mut n), 1),
        Some((1, true)),
        "a repeated request from the same candidate gets the same answer"
    );
    step(&mut n, request_vote(2, 3, 2, (0, 0)));
    assert_eq!(
        vote_reply(&sent(&mut n), 2),
        Some((2, true)),
        "a new term, a new vote"
    );
}

/// Does the Ready that grants a vote also persist it? (The driver writes `hard_state`
/// before it sends `messages`.)
fn granting_ready_persists_the_vote(bugs: InjectedBugs) -> bool {
    let cfg = plain(3, &[1, 2, 3]);
    let mut n = Node::with_injected_bugs(cfg, Recovered::default(), bugs).expect("node");
    step(&mut n, request_vote(1, 3, 1, (0, 0)));
    let rs = readies(&mut n);
    let granting: Vec<&Ready> = rs
        .iter()
        .filter(|r| vote_reply(&r.then.messages, 1) == Some((1, true)))
        .collect();
    assert_eq!(granting.len(), 1, "exactly one Ready grants the vote");
    granting[0]
        .persist
        .hard_state
        .is_some_and(|hs| hs.term == 1 && hs.vote == Some(1))
}

#[test]
fn test_5_2_vote_is_persisted_before_the_reply() {
    assert!(granting_ready_persists_the_vote(InjectedBugs::default()));
    // Test the test: with the vote left out of the hard state, the check fails.
    let bug = InjectedBugs {
        no_vote_persist: true,
        ..InjectedBugs::default()
    };
    assert!(!granting_ready_persists_the_vote(bug));
}

/// Node 3 votes for 1 in term 1, crashes, restarts from its disk, and is asked by 2 in the
/// same term. Returns whether it grants the second vote.
fn votes_twice_after_restart(bugs: InjectedBugs) -> bool {
    let cfg = plain(3, &[1, 2, 3]);
    let mut disk = Disk::default();
    let mut n = Node::with_injected_bugs(cfg.clone(), Recovered::default(), bugs).expect("node");
    step(&mut n, request_vote(1, 3, 1, (0, 0)));
    while n.has_ready() {
        let r = n.ready();
        disk.persist(&r.persist);
        n.advance();
    }
    drop(n);
    let mut n = Node::with_injected_bugs(cfg, disk.recovered.clone(), bugs).expect("restart");
    assert_eq!(n.status().term, 1, "the term survives the restart");
    step(&mut n, request_vote(2, 3, 1, (0, 0)));
    vote_reply(&sent(&mut n), 2) == Some((1, true))
}

#[test]
fn test_5_2_a_restarted_node_does_not_vote_again_in_the_same_term() {
    assert!(!votes_twice_after_restart(InjectedBugs::default()));
    // Test the test: if the vote is not persisted, the restarted node votes again.
    let bug = InjectedBugs {
        no_vote_persist: true,
        ..InjectedBugs::default()
    };
    assert!(votes_twice_after_restart(bug));
}

#[test]
fn test_5_2_a_leader_never_grants_a_vote_in_its_own_term() {
    let mut net = Net::new(3, |_| {});
    elect(&mut net, 1);
    let term = net.status(1).term;
    let leader = net.nodes.get_mut(&1).expect("running");
    step(leader, request_vote(2, 1, term, (10, term)));
    assert_eq!(vote_reply(&sent(leader), 2), Some((term, false)));
    assert_eq!(leader.status().role, Role::Leader);
}

// ----- §5.3 log replication ------------------------------------------------------------------

#[test]
fn test_5_3_log_matching_conflicting_suffix_is_replaced() {
    // The follower holds 1@1 2@1 3@2 4@2; the leader of term 3 has 1@1 2@1 3@3.
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 2, &[1, 1, 2, 2]);
    step(&mut n, append(1, 2, 3, (2, 1), noops(3, &[3]), 0));
    assert_eq!(
        log_terms(&n),
        vec![1, 1, 3],
        "3@2 and 4@2 are gone, 3@3 is in"
    );
    assert_eq!(append_reply(&sent(&mut n), 1), (true, 3, None));
}

#[test]
fn test_5_3_matching_entries_are_kept_and_a_stale_append_does_not_truncate() {
    // A delayed AppendEntries carrying a prefix of what the follower already has must not
    // cut off the entries after it.
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 2, &[1, 1, 2, 2]);
    step(&mut n, append(1, 2, 2, (1, 1), noops(2, &[1, 2]), 0));
    assert_eq!(log_terms(&n), vec![1, 1, 2, 2]);
    assert_eq!(append_reply(&sent(&mut n), 1), (true, 3, None));
}

#[test]
fn test_5_3_append_after_a_gap_is_refused_with_a_hint() {
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 2, &[1, 1]);
    step(&mut n, append(1, 2, 2, (5, 2), noops(6, &[2]), 0));
    assert_eq!(log_terms(&n), vec![1, 1]);
    assert_eq!(
        append_reply(&sent(&mut n), 1),
        (false, 0, Some(3)),
        "the follower's log ends at 2: retry from 3"
    );
}

#[test]
fn test_5_3_follower_commit_is_capped_by_the_last_new_entry() {
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 1, &[1]);
    step(&mut n, append(1, 2, 1, (1, 1), noops(2, &[1]), 9));
    assert_eq!(
        n.status().commit,
        2,
        "the leader committed 9 but only 2 is known to match"
    );

    // Figure 2, AppendEntries rule 5: commit up to min(leaderCommit, index of the last new
    // entry), not up to the end of the follower's log. The follower holds 4@2 and 5@2 from
    // a deposed leader; the leader of term 3 (whose 4 and 5 differ) sends only 2@1, in a
    // small batch, with its commit index at 5. 4@2 and 5@2 are not known to match: committing
    // them would apply entries that no leader committed.
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 2, &[1, 1, 1, 2, 2]);
    step(&mut n, append(1, 2, 3, (1, 1), noops(2, &[1]), 5));
    assert_eq!(
        log_terms(&n),
        vec![1, 1, 1, 2, 2],
        "2@1 matched: nothing cut"
    );
    assert_eq!(n.status().commit, 2, "only 2 is known to match the leader");
    assert_eq!(append_reply(&sent(&mut n), 1), (true, 2, None));

    // The same for an append that starts below the commit index (a delayed one): 3@1 is
    // new and matches, 4@2 still is not known to.
    step(&mut n, append(1, 2, 3, (0, 0), noops(1, &[1, 1, 1]), 5));
    assert_eq!(log_terms(&n), vec![1, 1, 1, 2, 2]);
    assert_eq!(n.status().commit, 3, "only 3 is known to match the leader");
    assert_eq!(append_reply(&sent(&mut n), 1), (true, 3, None));
}

#[test]
fn test_5_3_fast_backtracking_reaches_the_divergence_point_in_few_round_trips() {
    // Figure 7, scaled up: the follower holds 50 entries of a term the leader never had.
    // Stepping back one entry per refusal would take 50 round trips; the hint takes one.
    let mut leader_log = vec![1, 1, 1];
    leader_log.extend(std::iter::repeat_n(4, 50));
    let mut stale_log = vec![1, 1, 1];
    stale_log.extend(std::iter::repeat_n(2, 50));
    let mut net = Net::new(3, |_| {});
    let disk = |terms: &[Term]| disk_with(4, None, 3, noops(1, terms));
    net.load(1, disk(&leader_log));
    net.load(2, disk(&stale_log));
    net.load(3, disk(&leader_log));
    net.campaign(1);
    net.deliver_if(is_vote);
    assert_eq!(net.status(1).role, Role::Leader);

    let mut refusals = 0;
    let mut round_trips = 0;
    while net.node(2).log_entries() != net.node(1).log_entries() {
        round_trips += 1;
        assert!(round_trips <= 10, "node 2 never caught up");
        net.flush();
        let (to_2, rest): (Vec<Message>, Vec<Message>) = std::mem::take(&mut net.inflight)
            .into_iter()
            .partition(|m| m.to == 2);
        net.inflight = rest;
        for m in to_2 {
            let follower = net.nodes.get_mut(&2).expect("running");
            step(follower, m);
            for reply in sent(follower) {
                if matches!(
                    reply.body,
                    Body::AppendEntriesResponse { success: false, .. }
                ) {
                    refusals += 1;
                }
                step(net.nodes.get_mut(&1).expect("running"), reply);
            }
        }
    }
    assert_eq!(
        refusals, 1,
        "one refusal carries the hint that skips all of term 2"
    );
    assert!(round_trips <= 3, "{round_trips} round trips");
}

// ----- §5.4 safety ---------------------------------------------------------------------------

#[test]
fn test_5_4_1_candidate_with_stale_log_loses() {
    // The voter's log ends at 3@2.
    let cases = [
        ((5, 1), false, "older last term, even with a longer log"),
        ((2, 2), false, "same last term, shorter log"),
        ((3, 2), true, "same last term, same length"),
        ((4, 2), true, "same last term, longer log"),
        ((1, 3), true, "newer last term, even with a shorter log"),
    ];
    for (last, expected, why) in cases {
        let mut n = node_with_log(plain(3, &[1, 2, 3]), 2, &[1, 2, 2]);
        step(&mut n, request_vote(1, 3, 4, last));
        assert_eq!(
            vote_reply(&sent(&mut n), 1),
            Some((4, expected)),
            "candidate log ending at {}@{}: {why}",
            last.0,
            last.1
        );
        assert_eq!(n.status().term, 4, "the voter adopts the term either way");
    }
}

/// Figure 8 up to (c): S1 leads term 3 and has just copied 2@1, an entry of term 1, to a
/// majority (S1, S2, S3), while its own 3@3 is only on S1 and S2. S5 holds 2@2 and is down.
fn figure_8_c() -> Net {
    // One entry per message, so that 2@1 and 3@3 travel separately.
    let mut net = Net::new(5, |c| c.append_entries_max = 1);
    elect(&mut net, 1);
    net.deliver_all();
    assert_eq!(net.status(3).commit, 1, "1@1 is committed everywhere");

    // (a) S1 leads term 1 and replicates 2@1 to S2 only.
    assert_eq!(net.propose(1, grant()), 2);
    net.deliver_if(among(&[1, 2]));
    net.drop_all();
    assert_eq!(net.status(1).commit, 1, "2@1 is on 2 of 5 nodes");

    // (b) S1 crashes. S5 wins term 2 with the votes of S3 and S4 (S2's log is longer and it
    // refuses), appends 2@2, and crashes before sending it.
    net.crash(1);
    net.campaign(5);
    net.deliver_if(is_vote);
    assert_eq!((net.status(5).role, net.status(5).term), (Role::Leader, 2));
    assert_eq!(log_terms(net.node(5)), vec![1, 2]);
    net.drop_all();
    net.crash(5);

    // (c) S1 restarts and wins term 3 (its first try, in term 2, meets S3 and S4 who voted
    // for S5 in term 2). It appends 3@3, sends it to S2, and brings S3 up to 2@1; the copy
    // of 3@3 to S3, and everything to S4, is lost.
    net.restart(1);
    while net.status(1).role != Role::Leader {
        net.campaign(1);
        net.deliver_if(is_vote);
    }
    assert_eq!(net.status(1).term, 3);
    // The first copy of 3@3 to S3 is refused (S3 lacks index 2) and makes S1 back up to
    // 2@1; the second copy, after 2@1, is the one lost.
    let mut copies_to_3 = 0;
    net.deliver_if(|m| {
        if m.to == 4 || m.from == 4 {
            return false;
        }
        if m.to == 3 && carries_term(m, 3) {
            copies_to_3 += 1;
            return copies_to_3 == 1;
        }
        true
    });
    net.drop_all();
    assert_eq!(log_terms(net.node(1)), vec![1, 1, 3]);
    assert_eq!(log_terms(net.node(2)), vec![1, 1, 3]);
    assert_eq!(log_terms(net.node(3)), vec![1, 1]);
    net
}

fn carries_term(m: &Message, term: Term) -> bool {
    matches!(&m.body, Body::AppendEntries { entries, .. } if entries.iter().any(|e| e.term == term))
}

#[test]
fn test_5_4_2_leader_commits_old_term_entries_only_through_a_current_term_entry() {
    let mut net = figure_8_c();
    // 2@1 is stored by a majority, but it is of an earlier term: counting replicas does
    // not commit it.
    assert_eq!(net.status(1).commit, 1);

    // (d) S1 crashes; S5 restarts and wins term 4 with S3 and S4, whose logs end in terms 1
    // and below its 2@2 (S2 refuses: its log ends in term 3). S5 overwrites index 2, which
    // is allowed precisely because 2@1 was never committed.
    net.crash(1);
    net.restart(5);
    while net.status(5).role != Role::Leader {
        net.campaign(5);
        net.deliver_if(is_vote);
    }
    net.deliver_all();
    for id in [2, 3, 4, 5] {
        assert_eq!(
            net.node(id).log_entries()[1].term,
            2,
            "node {id}: index 2 now holds S5's 2@2"
        );
        assert!(
            net.status(id).commit >= 3,
            "node {id}: S5's no-op committed"
        );
    }
}

#[test]
fn test_5_4_2_once_a_current_term_entry_commits_the_old_entries_are_safe() {
    let mut net = figure_8_c();
    // (e) S1 copies 3@3 to S3 as well: a majority stores an entry of term 3, which commits
    // it and everything before it, 2@1 included.
    let term = net.status(1).term;
    {
        let leader = net.nodes.get_mut(&1).expect("running");
        leader.tick();
        leader.tick();
        leader.tick();
    }
    net.deliver_if(among(&[1, 2, 3]));
    assert_eq!(net.status(1).commit, 3);
    assert_eq!(net.status(1).term, term);

    // Now S5 cannot win: S2 and S3 hold a log ending in term 3, newer than its 2@2.
    net.crash(1);
    net.restart(5);
    for _ in 0..5 {
        net.campaign(5);
        net.deliver_if(is_vote);
        assert_ne!(net.status(5).role, Role::Leader);
    }
}

// ----- §6 membership -------------------------------------------------------------------------

#[test]
fn test_6_membership_joint_needs_both_majorities() {
    // Move from voters (1,2,3) to (1,4,5). Nodes 4 and 5 start empty.
    let mut net = Net::with_voters(5, &[1, 2, 3], |_| {});
    elect(&mut net, 1);
    let voters: BTreeSet<NodeId> = [1, 4, 5].into_iter().collect();
    let index = {
        let leader = net.nodes.get_mut(&1).expect("running");
        leader
            .change_membership(voters, BTreeSet::new())
            .expect("accepted")
            .index
    };
    let joint = net.status(1).membership;
    assert!(joint.is_joint());
    assert_eq!(joint.voters_outgoing, [1, 2, 3].into_iter().collect());

    // The old voters alone: 1, 2, 3 is a majority of (1,2,3) but only 1 of (1,4,5).
    net.deliver_if(among(&[1, 2, 3]));
    assert!(net.status(1).commit < index, "old majority only");

    // Node 4 catches up through heartbeats: (1,4) is a majority of (1,4,5) too.
    for _ in 0..3 {
        net.nodes.get_mut(&1).expect("running").tick();
    }
    net.deliver_if(|m| m.to != 5 && m.from != 5);
    assert!(net.status(1).commit >= index, "both majorities hold");
    assert_eq!(
        net.status(1).membership.voters,
        [1, 4, 5].into_iter().collect(),
        "the joint configuration was left on its own"
    );
}

#[test]
fn test_6_a_joint_election_needs_both_majorities() {
    // Node 1 restarts with the joint configuration (1,2,3 & 3,4,5) in its log.
    let joint = Membership {
        voters: [3, 4, 5].into_iter().collect(),
        voters_outgoing: [1, 2, 3].into_iter().collect(),
        learners: BTreeSet::new(),
    };
    let recovered = disk_with(
        1,
        None,
        1,
        vec![Entry {
            term: 1,
            index: 1,
            payload: Payload::Membership(joint),
        }],
    );
    let mut n = Node::new(plain(1, &[1, 2, 3]), recovered).expect("node");
    campaign(&mut n);
    let asked: BTreeSet<NodeId> = sent(&mut n).iter().map(|m| m.to).collect();
    assert_eq!(
        asked,
        [2, 3, 4, 5].into_iter().collect(),
        "voters of both halves"
    );
    let term = n.status().term;
    let grant_from = |from| Message {
        from,
        to: 1,
        term,
        body: Body::RequestVoteResponse { granted: true },
    };
    step(&mut n, grant_from(2));
    assert_eq!(
        n.status().role,
        Role::Candidate,
        "(1,2) is a majority of the old voters only"
    );
    step(&mut n, grant_from(4));
    assert_eq!(
        n.status().role,
        Role::Candidate,
        "(4) alone is no majority of (3,4,5)"
    );
    step(&mut n, grant_from(5));
    assert_eq!(n.status().role, Role::Leader);
}

// ----- §7 log compaction ---------------------------------------------------------------------

/// A snapshot at `index`@`term` of a state machine holding one session granted at 1.
fn snapshot_at(index: Index, term: Term) -> Snapshot {
    let mut sm = StateMachine::new(SmLimits::default());
    sm.apply(1, &grant());
    sm.apply(
        index,
        &Command::Leader {
            election: "e".into(),
        },
    );
    Snapshot {
        index,
        term,
        membership: Membership::new([1, 2, 3]),
        data: sm.snapshot(),
    }
}

fn install(from: NodeId, to: NodeId, term: Term, snapshot: Snapshot) -> Message {
    Message {
        from,
        to,
        term,
        body: Body::InstallSnapshot {
            snapshot,
            sent_tick: 0,
        },
    }
}

#[test]
fn test_7_snapshot_install_replaces_conflicting_log() {
    // The follower's 3@2 4@2 conflict with the leader's history (3@3 is in the snapshot).
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 2, &[1, 1, 2, 2]);
    step(&mut n, install(1, 2, 3, snapshot_at(5, 3)));
    assert_eq!(n.snapshot_meta(), (5, 3));
    assert!(n.log_entries().is_empty(), "the conflicting log is gone");
    let s = n.status();
    assert_eq!((s.commit, s.applied, s.last_index), (5, 5, 5));
    assert!(
        n.state_machine().session(1).is_some(),
        "the state machine is the snapshot's"
    );
    let rs = readies(&mut n);
    assert!(
        rs[0]
            .persist
            .snapshot
            .as_ref()
            .is_some_and(|s| s.index == 5),
        "the snapshot is persisted in the Ready that acknowledges it"
    );
    assert_eq!(append_reply(&rs[0].then.messages, 1), (true, 5, None));
}

#[test]
fn test_7_snapshot_of_a_prefix_keeps_the_entries_after_it() {
    // The follower already holds 3@1 and entries after it: a snapshot ending at 3@1 only
    // tells it that 3 is committed.
    let mut n = node_with_log(plain(2, &[1, 2, 3]), 1, &[1, 1, 1, 1, 1]);
    step(&mut n, install(1, 2, 1, snapshot_at(3, 1)));
    assert_eq!(log_terms(&n), vec![1, 1, 1, 1, 1]);
    assert_eq!(n.status().commit, 3);
}

// ----- dissertation §9.6 pre-vote ------------------------------------------------------------

#[test]
fn test_9_6_prevote_does_not_raise_terms() {
    let mut cfg = plain(1, &[1, 2, 3]);
    cfg.pre_vote = true;
    let mut n = node_with_log(cfg, 5, &[5]);
    campaign(&mut n);
    let s = n.status();
    assert_eq!((s.role, s.term, s.vote), (Role::PreCandidate, 5, None));
    let msgs = sent(&mut n);
    assert!(msgs
        .iter()
        .all(|m| matches!(m.body, Body::PreVote { .. }) && m.term == 6));

    // A voter answers a pre-vote without changing anything.
    let mut cfg = plain(2, &[1, 2, 3]);
    cfg.pre_vote = true;
    let mut voter = node_with_log(cfg, 5, &[5]);
    let before = voter.status();
    let pre_vote = Message {
        from: 1,
        to: 2,
        term: 6,
        body: Body::PreVote {
            last_log_index: 1,
            last_log_term: 5,
        },
    };
    step(&mut voter, pre_vote);
    let rs = readies(&mut voter);
    assert!(
        rs.iter().all(|r| r.persist.hard_state.is_none()),
        "nothing to persist"
    );
    assert_eq!(
        vote_reply(&rs[0].then.messages, 1),
        Some((6, true)),
        "granted, at the proposed term"
    );
    assert_eq!(voter.status(), before);

    // Losing the pre-vote leaves the term where it was.
    let refusal = |from| Message {
        from,
        to: 1,
        term: 5,
        body: Body::PreVoteResponse { granted: false },
    };
    step(&mut n, refusal(2));
    step(&mut n, refusal(3));
    let s = n.status();
    assert_eq!((s.role, s.term), (Role::Follower, 5));
}

// ----- dissertation §3.10 leadership transfer ------------------------------------------------

#[test]
fn dissertation_3_10_transfer_target_campaigns_at_once_and_voters_ignore_their_lease() {
    let mut net = Net::new(3, |c| {
        c.pre_vote = true;
        c.check_quorum = true;
    });
    net.tick_all(15);
    elect(&mut net, 1);
    net.nodes
        .get_mut(&1)
        .expect("running")
        .transfer_leadership(3)
        .expect("accepted");
    net.flush();
    let timeout_now = net
        .inflight
        .iter()
        .find(|m| matches!(m.body, Body::TimeoutNow))
        .expect("node 3 is up to date: TimeoutNow at once")
        .clone();
    assert_eq!(timeout_now.to, 3);
    net.inflight.clear();
    let target = net.nodes.get_mut(&3).expect("running");
    step(target, timeout_now);
    let s = target.status();
    assert_eq!(
        (s.role, s.term),
        (Role::Candidate, 2),
        "no pre-vote, no waiting"
    );
    net.flush();
    assert!(net
        .inflight
        .iter()
        .all(|m| matches!(m.body, Body::RequestVote { transfer: true, .. })));
    // Node 2 heard from the leader moments ago, yet grants: the leader asked for this.
    net.deliver_all();
    assert_eq!(net.status(3).role, Role::Leader);
    assert_eq!(net.status(2).vote, Some(3));
}

#[test]
fn dissertation_3_10_leader_refuses_proposals_while_transferring() {
    let mut net = Net::new(3, |_| {});
    elect(&mut net, 1);
    net.crash(3);
    let leader = net.nodes.get_mut(&1).expect("running");
    leader.propose(grant()).expect("accepted");
    leader.transfer_leadership(3).expect("transfer starts");
    assert_eq!(leader.propose(grant()), Err(ProposeError::Transferring));
    assert_eq!(
        leader.transfer_leadership(2),
        Err(ProposeError::Transferring)
    );
    assert!(
        matches!(
            leader.transfer_leadership(9),
            Err(ProposeError::InvalidMembership(_))
        ),
        "node 9 is not a voter"
    );
}

// ----- check-quorum (dissertation §6.2, §4.2.3) ----------------------------------------------

#[test]
fn check_quorum_leader_without_a_majority_steps_down_within_two_election_timeouts() {
    let mut net = Net::new(3, |c| c.check_quorum = true);
    let t = net.configs[&1].election_timeout_ticks;
    // Fresh nodes refuse votes for T, as if they had just heard from a leader.
    net.tick_all(t);
    elect(&mut net, 1);
    net.drop_all();
    let leader = net.nodes.get_mut(&1).expect("running");
    let mut ticks = 0;
    while leader.status().role == Role::Leader {
        leader.tick();
        sent(leader);
        ticks += 1;
        assert!(ticks <= 2 * t, "still leading after {ticks} ticks alone");
    }
    let s = leader.status();
    assert_eq!(
        (s.role, s.leader, s.term),
        (Role::Follower, None, 1),
        "same term"
    );
    assert_eq!(s.lease_until_tick, None);
}

#[test]
fn check_quorum_follower_that_heard_from_a_leader_ignores_candidates() {
    let mut net = Net::new(3, |c| c.check_quorum = true);
    let t = net.configs[&2].election_timeout_ticks;
    net.tick_all(t);
    elect(&mut net, 1);
    let follower = net.nodes.get_mut(&2).expect("running");
    let before = follower.status();
    step(follower, request_vote(3, 2, 5, (10, 1)));
    assert!(sent(follower).is_empty(), "no answer at all");
    assert_eq!(follower.status(), before, "not even the term moved");

    // After an election timeout without the leader, the same request is considered.
    let follower = net.nodes.get_mut(&2).expect("running");
    for _ in 0..t {
        follower.tick();
    }
    sent(follower);
    step(follower, request_vote(3, 2, 5, (10, 1)));
    assert_eq!(vote_reply(&sent(follower), 3), Some((5, true)));
}

// ----- bad input -----------------------------------------------------------------------------

#[test]
fn malformed_messages_are_rejected_and_change_nothing() {
    let entry = |index, term| Entry {
        term,
        index,
        payload: Payload::Noop,
    };
    let snap = |index, term, voters: &[NodeId]| Snapshot {
        index,
        term,
        membership: Membership::new(voters.iter().copied()),
        data: Vec::new(),
    };
    let vote_with_last_term = |last_log_term| Body::RequestVote {
        last_log_index: 1,
        last_log_term,
        transfer: false,
    };
    let ae = |prev: (Index, Term), entries: Vec<Entry>| Body::AppendEntries {
        prev_log_index: prev.0,
        prev_log_term: prev.1,
        entries,
        leader_commit: 2,
        sent_tick: 0,
    };
    let heartbeat = ae((2, 1), vec![]);
    // (description, from, to, term, body, expected error)
    type Case = (
        &'static str,
        NodeId,
        NodeId,
        Term,
        Body,
        fn(&StepError) -> bool,
    );
    let cases: Vec<Case> = vec![
        ("wrong recipient", 1, 3, 5, heartbeat.clone(), |e| {
            matches!(e, StepError::WrongRecipient { to: 3, me: 2 })
        }),
        ("sender 0", 0, 2, 5, heartbeat.clone(), |e| {
            matches!(e, StepError::InvalidSender(0))
        }),
        ("sender is the receiver", 2, 2, 5, heartbeat.clone(), |e| {
            matches!(e, StepError::InvalidSender(2))
        }),
        (
            "non-contiguous entries",
            1,
            2,
            5,
            ae((2, 1), vec![entry(3, 5), entry(5, 5)]),
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "entries not following prev",
            1,
            2,
            5,
            ae((2, 1), vec![entry(4, 5)]),
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "entry term above message term",
            1,
            2,
            5,
            ae((2, 1), vec![entry(3, 6)]),
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "entry terms going down",
            1,
            2,
            5,
            ae((2, 1), vec![entry(3, 4), entry(4, 3)]),
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "entry term below prev term",
            1,
            2,
            5,
            ae((2, 4), vec![entry(3, 3)]),
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "prev term above message term",
            1,
            2,
            5,
            ae((2, 6), vec![]),
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "empty snapshot",
            1,
            2,
            5,
            Body::InstallSnapshot {
                snapshot: snap(0, 0, &[1, 2, 3]),
                sent_tick: 0,
            },
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "snapshot without voters",
            1,
            2,
            5,
            Body::InstallSnapshot {
                snapshot: snap(9, 5, &[]),
                sent_tick: 0,
            },
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "snapshot term above message term",
            1,
            2,
            5,
            Body::InstallSnapshot {
                snapshot: snap(9, 6, &[1, 2, 3]),
                sent_tick: 0,
            },
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "vote request whose last term is above its term",
            3,
            2,
            5,
            vote_with_last_term(6),
            |e| matches!(e, StepError::Malformed { .. }),
        ),
        (
            "pre-vote whose last term is above its term",
            3,
            2,
            5,
            Body::PreVote {
                last_log_index: 1,
                last_log_term: 6,
            },
            |e| matches!(e, StepError::Malformed { .. }),
        ),
    ];
    for (what, from, to, term, body, expected) in cases {
        // A follower of term 1 with two entries, one committed; every message has a higher
        // term, so a node that acted on it before validating would at least move its term.
        let recovered = disk_with(1, Some(1), 1, noops(1, &[1, 1]));
        let mut n = Node::new(plain(2, &[1, 2, 3]), recovered).expect("node");
        readies(&mut n);
        let before = (n.status(), n.log_entries().to_vec(), n.snapshot_meta());
        let result = n.step(Message {
            from,
            to,
            term,
            body,
        });
        match &result {
            Err(e) => assert!(expected(e), "{what}: unexpected error {e:?}"),
            Ok(()) => panic!("{what}: accepted"),
        }
        let after = (n.status(), n.log_entries().to_vec(), n.snapshot_meta());
        assert_eq!(before, after, "{what}: the node changed");
        assert!(!n.has_ready(), "{what}: the node has something to do");
        n.check_invariants();
    }
}

#[test]
fn config_validate_rejects_bad_values() {
    let ok = Config::new(1, vec![1, 2, 3]);
    assert_eq!(ok.validate(), Ok(()));
    type Tweak = fn(&mut Config);
    let cases: Vec<(&str, Tweak, ConfigError)> = vec![
        ("id 0", |c| c.id = 0, ConfigError::ZeroId),
        (
            "voter 0",
            |c| c.initial_voters = vec![0, 1],
            ConfigError::ZeroId,
        ),
        (
            "T below 5",
            |c| {
                c.election_timeout_ticks = 4;
                c.heartbeat_ticks = 1;
            },
            ConfigError::ElectionTimeoutTooShort(4),
        ),
        (
            "heartbeat 0",
            |c| c.heartbeat_ticks = 0,
            ConfigError::HeartbeatTooSlow {
                heartbeat_ticks: 0,
                election_timeout_ticks: 15,
            },
        ),
        (
            "heartbeat above T/5",
            |c| c.heartbeat_ticks = 4,
            ConfigError::HeartbeatTooSlow {
                heartbeat_ticks: 4,
                election_timeout_ticks: 15,
            },
        ),
        (
            "drift above 10%",
            |c| c.clock_drift_max = DriftPpm(100_001),
            ConfigError::DriftOutOfRange(DriftPpm(100_001)),
        ),
        (
            "margin eats the lease",
            |c| {
                c.election_timeout_ticks = 5;
                c.heartbeat_ticks = 1;
            },
            ConfigError::LeaseMarginTooLarge,
        ),
        (
            "append_entries_max 0",
            |c| c.append_entries_max = 0,
            ConfigError::Zero("append_entries_max"),
        ),
        (
            "snapshot threshold 0",
            |c| c.snapshot_threshold_entries = 0,
            ConfigError::Zero("snapshot_threshold_entries"),
        ),
        (
            "uncommitted max 0",
            |c| c.uncommitted_entries_max = 0,
            ConfigError::Zero("uncommitted_entries_max"),
        ),
        (
            "checkpoint interval 0",
            |c| c.lease_checkpoint_ticks = 0,
            ConfigError::Zero("lease_checkpoint_ticks"),
        ),
        (
            "ttl min 0",
            |c| c.limits.ttl_min_ticks = 0,
            ConfigError::Zero("limits.ttl_min_ticks"),
        ),
        (
            "ttl min above max",
            |c| {
                c.limits.ttl_min_ticks = 10;
                c.limits.ttl_max_ticks = 9;
            },
            ConfigError::TtlBounds { min: 10, max: 9 },
        ),
        (
            "zero key limit",
            |c| c.limits.key_bytes_max = 0,
            ConfigError::Zero("limits.key_bytes_max"),
        ),
    ];
    for (what, tweak, expected) in cases {
        let mut c = ok.clone();
        tweak(&mut c);
        assert_eq!(c.validate(), Err(expected.clone()), "{what}");
        assert!(
            Node::new(c, Recovered::default()).is_err(),
            "{what}: Node::new must refuse it too"
        );
    }
}
