//! DESIGN rule 4 on the node: a keepalive acknowledged at local tick R promises the holder
//! that no replica ends the session before R + TTL. These tests drive a three-node cluster in
//! lockstep (every node ticks once per round, so local ticks agree) and check that promise
//! against the moment the session actually ends.

mod common;

use common::Cluster;
use tenure_core::message::Body;
use tenure_core::node::Node;
use tenure_core::sm::{Command, Response, SessionId};
use tenure_core::types::{NodeId, Payload};

/// Grant a session with `ttl_ticks` at the elected leader and commit it everywhere.
fn granted(c: &mut Cluster, leader: NodeId, ttl_ticks: u64) -> SessionId {
    let p = c
        .node_mut(leader)
        .propose(Command::Grant { ttl_ticks })
        .expect("leader accepts");
    c.flush();
    c.deliver_all();
    let applied = c.applied[&leader]
        .iter()
        .find(|a| a.index == p.index)
        .expect("grant applied");
    assert_eq!(
        applied.response,
        Response::Granted {
            session: p.index,
            ttl_ticks
        }
    );
    p.index
}

fn now(c: &Cluster, id: NodeId) -> u64 {
    c.node(id).status().now_tick
}

fn alive_everywhere(c: &Cluster, s: SessionId) -> bool {
    c.nodes
        .values()
        .all(|n| n.state_machine().session(s).is_some())
}

fn acked(c: &Cluster, leader: NodeId, tag: u64) -> bool {
    c.acks
        .get(&leader)
        .is_some_and(|a| a.iter().any(|k| k.tag == tag))
}

/// True if the leader's log ends with an uncommitted `Expire` of `s`.
fn expiry_pending(n: &Node, s: SessionId) -> bool {
    let st = n.status();
    n.log_entries().last().is_some_and(|e| {
        e.index > st.commit && e.payload == Payload::Command(Command::Expire { session: s })
    })
}

#[test]
fn design_rule_4_acknowledged_keepalives_keep_the_session_for_their_ttl() {
    for (ttl, every) in [(10, 3), (30, 7), (45, 14), (60, 20)] {
        let mut c = Cluster::new(3);
        let l = c.elect();
        let s = granted(&mut c, l, ttl);
        // The holder sends a keepalive every `every` ticks for a while, then stops.
        let mut promised_until = 0;
        for tag in 0..8 {
            c.node_mut(l).keepalive(s, tag).expect("session is live");
            let received = now(&c, l);
            c.flush();
            c.deliver_all();
            for _ in 0..every {
                c.tick();
                if acked(&c, l, tag) {
                    promised_until = promised_until.max(received + ttl);
                }
            }
            assert!(acked(&c, l, tag), "ttl {ttl}: keepalive {tag} never acked");
        }
        // Silence: the session must live until the last promise, and then end.
        while alive_everywhere(&c, s) {
            c.tick();
            assert!(
                now(&c, l) < promised_until + 3 * ttl,
                "ttl {ttl}: never expired"
            );
        }
        assert!(
            now(&c, l) >= promised_until,
            "ttl {ttl}: ended at tick {} but an acknowledgement promised {promised_until}",
            now(&c, l)
        );
    }
}

/// Minimal script of the race, with the default configuration (checkpoints every 5 ticks):
///
/// 1. grant a session with a TTL of 10 ticks; two ticks later, one keepalive (it is
///    acknowledged after the next checkpoint, `Checkpoint(s: 10 + 2·5)`, commits);
/// 2. then silence, until the leader's deadline (keepalive + 10) passes and it appends
///    `Expire(s)`;
/// 3. in that same tick, before `Expire(s)` is replicated, a keepalive for `s` arrives.
///    `Node::keepalive` accepts it, and because the committed checkpoint still covers
///    `now + 10`, the very next Ready acknowledges it;
/// 4. `Expire(s)` commits and every replica ends the session at once: 10 ticks before the
///    acknowledgement promised.
///
/// The leader should refuse (or at least never acknowledge) keepalives for a session whose
/// `Expire` it has proposed and not yet applied (`LeaseClock::expiring` in node.rs).
#[test]
fn design_rule_4_no_keepalive_is_acknowledged_once_the_expiry_is_proposed() {
    let mut c = Cluster::new(3);
    let l = c.elect();
    let s = granted(&mut c, l, 10);
    c.ticks(2);
    c.node_mut(l).keepalive(s, 1).expect("session is live");
    c.flush();
    c.deliver_all();

    // Tick every node once per round, without delivering, until the leader proposes Expire(s).
    let mut rounds = 0;
    while !expiry_pending(c.node(l), s) {
        c.deliver_all();
        for n in c.nodes.values_mut() {
            n.tick();
        }
        c.flush();
        rounds += 1;
        assert!(rounds < 50, "the leader never proposed Expire({s})");
    }
    assert!(acked(&c, l, 1), "the first keepalive was acknowledged");

    let received = now(&c, l);
    let answer = c.node_mut(l).keepalive(s, 2);
    c.flush();
    let acknowledged = acked(&c, l, 2);
    c.deliver_all();
    // The leader refuses a keepalive for a session whose expiry it proposed: to the holder
    // the session is gone, which is what the committed expiry will say anyway.
    assert_eq!(
        answer,
        Err(tenure_core::node::ProposeError::UnknownSession(s)),
        "a keepalive racing the proposed expiry must be refused"
    );
    assert!(!acknowledged, "a refused keepalive is never acknowledged");
    if acknowledged {
        assert!(
            alive_everywhere(&c, s),
            "keepalive received at tick {received} was acknowledged with ttl 10, yet the \
             session ended at tick {}",
            now(&c, l)
        );
    }
}

/// Once a leader has sent TimeoutNow, its transferee can win at any moment with votes that
/// ignore the vote refusal, so a quorum round answered after that proves only that the
/// transferee had not won yet when the round was answered, not when the leader counts it.
/// A keepalive waiting for such a round is never acknowledged (the simulator found this race
/// with five nodes: a keepalive acknowledged in term N after a leader of term N+1 won).
///
/// Here the leader's lease has run out (its followers' answers were held back), so a
/// keepalive waits for a quorum round; the leader then sends TimeoutNow, which stays in
/// flight (it is lost), while both followers answer every round: the keepalive must still
/// not be acknowledged.
#[test]
fn design_rule_4_no_keepalive_is_confirmed_after_timeout_now() {
    // Checkpoints every 10 ticks cover keepalives for 20 ticks after they are proposed:
    // longer than the leader lease, so that a keepalive can be covered and still need a
    // quorum round.
    let mut c = Cluster::with_config(3, |cfg| cfg.lease_checkpoint_ticks = 10);
    let l = c.elect();
    let s = granted(&mut c, l, 100);
    let to = c
        .nodes
        .keys()
        .copied()
        .find(|id| *id != l)
        .expect("two followers");
    // A first keepalive gets a checkpoint proposed and committed, and is acknowledged.
    c.node_mut(l).keepalive(s, 1).expect("session is live");
    let mut waited = 0;
    while !acked(&c, l, 1) {
        c.tick();
        waited += 1;
        assert!(waited < 30, "the first keepalive was never acknowledged");
    }
    // Only the leader ticks, and nothing it sends arrives, until its lease is over (less
    // than an election timeout: it still leads).
    let mut held = 0;
    while c.node(l).status().lease_until_tick > Some(c.node(l).status().now_tick) {
        c.node_mut(l).tick();
        c.flush();
        c.inflight.clear();
        held += 1;
        assert!(held < 100, "the lease never ran out");
    }
    assert_eq!(c.leaders(), vec![l], "still the leader");

    c.node_mut(l).keepalive(s, 7).expect("session is live");
    c.flush();
    assert!(
        !acked(&c, l, 7),
        "no lease: the keepalive waits for a round"
    );
    c.lose = |m| matches!(m.body, Body::TimeoutNow);
    c.node_mut(l)
        .transfer_leadership(to)
        .expect("a voter with a full log");
    assert_eq!(c.node(l).status().transferring_to, Some(to));
    for _ in 0..5 {
        c.tick();
        assert!(c.node(l).status().transferring_to.is_some());
        assert!(
            !acked(&c, l, 7),
            "a keepalive was confirmed by a quorum round answered after TimeoutNow was sent"
        );
    }
}
