//! DESIGN rule 4 on the node: a keepalive acknowledged at local tick R promises the holder
//! that no replica ends the session before R + TTL. These tests drive a three-node cluster in
//! lockstep (every node ticks once per round, so local ticks agree) and check that promise
//! against the moment the session actually ends.

mod common;

use common::Cluster;
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
