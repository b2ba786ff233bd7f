//! Liveness after heal — the simulator's issue ("heal everything: a leader must be elected
//! within 10 election timeouts and pending client operations must complete"), i.e. Raft's
//! availability claim (§5.6, "as long as … a majority of the servers are operational and can
//! communicate") once every fault is gone.
//!
//! From the moment everything is healed, some node must be seen in the leader role within
//! ten election timeouts T (T of the slowest clock), a leader must exist when the run ends,
//! and every client operation invoked during the run must have been answered by then.
//!
//! And a leadership transfer asked for then (nothing failing) completes: its target is seen
//! leading within `TRANSFER_TIMEOUTS_ALLOWED` election timeouts (dissertation §3.10: the
//! leader stops taking proposals, brings the target up to date, then sends TimeoutNow).

use std::collections::BTreeMap;

use tenure_core::node::Role;
use tenure_core::types::NodeId;

use super::{Checker, View};
use crate::observe::{ClientId, Observation, OpId};
use crate::time::{fmt_time, SimTimeUs};

/// Election timeouts allowed for electing a leader after heal.
pub const ELECTION_TIMEOUTS_ALLOWED: u64 = 10;

/// Election timeouts allowed for a transfer asked for after heal to make its target leader.
pub const TRANSFER_TIMEOUTS_ALLOWED: u64 = 5;

/// Pending operations and leader sightings.
#[derive(Default)]
pub struct Liveness {
    pending: BTreeMap<OpId, (ClientId, SimTimeUs, String)>,
    healed_at_us: Option<SimTimeUs>,
    leader_at_us: Option<SimTimeUs>,
    /// A transfer asked for after heal and not yet seen through: (target, when).
    transfer: Option<(NodeId, SimTimeUs)>,
}

fn has_leader(view: &View<'_>) -> bool {
    view.nodes
        .values()
        .any(|s| s.is_up() && s.role() == Some(Role::Leader))
}

impl Checker for Liveness {
    fn name(&self) -> &'static str {
        "liveness"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        if let Some((to, at)) = self.transfer {
            let deadline = at + TRANSFER_TIMEOUTS_ALLOWED * view.election_timeout_us;
            if view.now_us > deadline {
                self.transfer = None;
                return Some(format!(
                    "a transfer to node {to} asked for at {} with nothing failing did not make \
                     it leader by {} ({TRANSFER_TIMEOUTS_ALLOWED} election timeouts)",
                    fmt_time(at),
                    fmt_time(deadline)
                ));
            }
        }
        match observation {
            Observation::TransferRequested { to, .. } => {
                self.transfer = Some((*to, view.now_us));
            }
            Observation::Role {
                role: Role::Leader,
                node,
                ..
            } if self.transfer.is_some_and(|(to, _)| to == *node) => {
                self.transfer = None;
                self.leader_at_us.get_or_insert(view.now_us);
            }
            Observation::OpInvoked {
                op,
                client,
                command,
            } => {
                self.pending
                    .insert(*op, (*client, view.now_us, format!("{command:?}")));
            }
            Observation::OpCompleted { op, .. } => {
                self.pending.remove(op);
            }
            Observation::Healed => {
                self.healed_at_us = Some(view.now_us);
                if has_leader(view) {
                    self.leader_at_us = Some(view.now_us);
                }
            }
            Observation::Role {
                role: Role::Leader, ..
            } if self.healed_at_us.is_some() => {
                self.leader_at_us.get_or_insert(view.now_us);
            }
            Observation::Finished => {
                let healed = self.healed_at_us?;
                let deadline = healed + ELECTION_TIMEOUTS_ALLOWED * view.election_timeout_us;
                match self.leader_at_us {
                    None => {
                        return Some(format!(
                            "no leader elected since everything healed at {} (deadline {})",
                            fmt_time(healed),
                            fmt_time(deadline)
                        ))
                    }
                    Some(at) if at > deadline => {
                        return Some(format!(
                            "first leader after heal at {} elected after the deadline {} ({} election timeouts)",
                            fmt_time(at),
                            fmt_time(deadline),
                            ELECTION_TIMEOUTS_ALLOWED
                        ))
                    }
                    Some(_) => {}
                }
                if !has_leader(view) {
                    return Some("no leader when the run ended".to_string());
                }
                if let Some((op, (client, at, command))) = self.pending.iter().next() {
                    return Some(format!(
                        "{} client operations never completed; the oldest, op {op} of client {client} invoked at {}: {command}",
                        self.pending.len(),
                        fmt_time(*at)
                    ));
                }
            }
            _ => {}
        }
        None
    }
}
