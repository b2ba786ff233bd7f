//! Connections closing, for the fast-election seeds (`Config::fast_election`): the model of
//! what the server's peer transport tells its node (docs/GUARANTEES.md "Fast election").
//!
//! A process that exits has its connections closed by its kernel: every peer it can reach
//! sees its connection to it end one network delay later. A peer that sees a connection
//! end tells its node (`Node::peer_connection_closed`) and redials at once; the redial is
//! refused only if nothing listens on the far end — the peer's process is down, not merely
//! paused — and the link carries the attempt both ways (a partition times a dial out, it
//! does not refuse it). A refused redial is told to the node
//! (`Node::peer_reconnect_refused`).
//!
//! Forged resets are a fault of their own: a middlebox (or an attacker) resets every
//! connection of a live leader at once. Each follower sees its connection end, redials,
//! and reaches the live leader's listener: nothing may change.

use tenure_core::types::NodeId;

use super::{Event, World};
use crate::driver::Drive;
use crate::protocol::Addr;
use crate::time::{SimTimeUs, US_PER_MS};
use crate::trace::TraceKind;

/// Range of the per-fault-tick probability of forged resets in a fast-election seed.
pub(super) const FORGED_RESET: (f64, f64) = (0.01, 0.08);
/// How long a connection event waits for a node that is paused or mid-fsync.
const RETRY_US: SimTimeUs = 5 * US_PER_MS;

/// Steps of one closed connection, as the world schedules them.
pub(super) enum Close {
    /// `at` sees its connection to `peer` end.
    Seen,
    /// `at`'s redial reaches `peer`'s side now.
    Redial,
    /// The redial was refused; `at` learns it. `epoch` is `at`'s follow epoch when the
    /// redial started, as the server's transport stamps it.
    Refused { epoch: u64 },
}

impl World {
    /// Peers of processes that exited since the last call see their connections end.
    pub(super) fn announce_exits(&mut self) {
        if !self.fast_election {
            return;
        }
        let exited: Vec<NodeId> = self
            .nodes
            .values_mut()
            .filter_map(|s| std::mem::take(&mut s.exited).then_some(s.id))
            .collect();
        for dead in exited {
            self.close_connections_of(dead);
        }
    }

    /// Every running node that `peer` can reach sees its connection to `peer` end.
    fn close_connections_of(&mut self, peer: NodeId) {
        let others: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|s| s.id != peer && s.is_up())
            .map(|s| s.id)
            .collect();
        for at in others {
            if self.network.is_blocked(Addr::Node(peer), Addr::Node(at)) {
                continue;
            }
            let delay = self.network.delay(&mut self.rng);
            let incarnation = self.nodes[&at].incarnation;
            self.schedule_connection(delay, at, incarnation, peer, Close::Seen);
        }
    }

    /// A forged reset of every connection of the current leader (which stays up).
    pub(super) fn forge_resets(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        self.stats.fault("forged-reset");
        self.trace
            .event(TraceKind::Fault, self.now_us, &[13, leader]);
        self.trace.log(self.now_us, || {
            format!("fault: every connection of leader {leader} is reset (forged)")
        });
        self.close_connections_of(leader);
    }

    pub(super) fn on_connection(
        &mut self,
        at: NodeId,
        incarnation: u64,
        peer: NodeId,
        step: Close,
    ) {
        let Some(slot) = self.nodes.get(&at) else {
            return;
        };
        if slot.incarnation != incarnation || !slot.is_up() {
            return;
        }
        if slot.paused || slot.persisting() {
            // The transport's task runs when the process does.
            self.schedule_connection(RETRY_US, at, incarnation, peer, step);
            return;
        }
        // A redial is stamped as it starts; its answer comes a round trip later, when the
        // node may follow someone else.
        let epoch = slot.follow_epoch();
        match step {
            Close::Seen => {
                self.trace.log(self.now_us, || {
                    format!("node {at}: connection to {peer} closed")
                });
                self.drive_close(at, peer, None);
                let delay = self.network.delay(&mut self.rng);
                self.schedule_connection(delay, at, incarnation, peer, Close::Redial);
            }
            Close::Redial => {
                let down = self.nodes.get(&peer).is_none_or(|s| !s.is_up());
                let both_ways = !self.network.is_blocked(Addr::Node(at), Addr::Node(peer))
                    && !self.network.is_blocked(Addr::Node(peer), Addr::Node(at));
                if down && both_ways {
                    let delay = self.network.delay(&mut self.rng);
                    let step = Close::Refused { epoch };
                    self.schedule_connection(delay, at, incarnation, peer, step);
                }
            }
            Close::Refused { epoch } => {
                if self.hold_refusal(at, peer, epoch) {
                    return;
                }
                self.trace.log(self.now_us, || {
                    format!("node {at}: reconnect to {peer} refused")
                });
                self.drive_close(at, peer, Some(epoch));
            }
        }
    }

    /// Schedules `step` of `at`'s connection to `peer`, `after` from now.
    pub(super) fn schedule_connection(
        &mut self,
        after: SimTimeUs,
        at: NodeId,
        incarnation: u64,
        peer: NodeId,
        step: Close,
    ) {
        self.queue.push(
            self.now_us + after,
            Event::Connection {
                at,
                incarnation,
                peer,
                step,
            },
        );
    }

    /// Tells node `at` of a closed connection (`refused: None`) or of a refused redial
    /// stamped with its follow epoch.
    pub(super) fn drive_close(&mut self, at: NodeId, peer: NodeId, refused: Option<u64>) {
        let drive = self.with_node(at, |slot, ctx| slot.peer_closed(peer, refused, ctx));
        self.after_drive(at, drive.unwrap_or(Drive::Running));
    }
}
