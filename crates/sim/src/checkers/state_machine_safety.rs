//! State Machine Safety — Raft §5.4.3 and Figure 3: "if a server has applied a log entry at a
//! given index to its state machine, no other server will ever apply a different log entry
//! for the same index". DESIGN rule 2.
//!
//! Every node's applied results are compared on (index, term, command) with the first report
//! of that index, and so is the response (the state machine is deterministic, so equal
//! histories give equal answers). The state machine digest is compared at equal applied
//! indices, which also covers state installed from snapshots.

use std::collections::BTreeMap;

use tenure_core::types::{Index, NodeId, Term};

use super::{Checker, View};
use crate::hash;
use crate::observe::Observation;

#[derive(Clone, Copy, Debug)]
struct AppliedRecord {
    term: Term,
    command: u64,
    response: u64,
    node: NodeId,
}

/// First report of every applied index and of every digest.
#[derive(Default)]
pub struct StateMachineSafety {
    applied: BTreeMap<Index, AppliedRecord>,
    digests: BTreeMap<Index, (u64, NodeId)>,
}

impl Checker for StateMachineSafety {
    fn name(&self) -> &'static str {
        "state-machine-safety"
    }

    fn observe(&mut self, observation: &Observation, _view: &View<'_>) -> Option<String> {
        match observation {
            Observation::Applied { node, applied, .. } => {
                for a in applied {
                    let record = AppliedRecord {
                        term: a.term,
                        command: hash::of_command(&a.command),
                        response: hash::of_response(&a.response),
                        node: *node,
                    };
                    match self.applied.get(&a.index) {
                        None => {
                            self.applied.insert(a.index, record);
                        }
                        Some(first) if first.term != record.term || first.command != record.command => {
                            return Some(format!(
                                "nodes {} and {node} applied different entries at index {} (terms {} and {}; this one is {:?})",
                                first.node, a.index, first.term, a.term, a.command
                            ));
                        }
                        Some(first) if first.response != record.response => {
                            return Some(format!(
                                "nodes {} and {node} applied the same command at index {} but answered differently (this one: {:?})",
                                first.node, a.index, a.response
                            ));
                        }
                        Some(_) => {}
                    }
                }
                None
            }
            Observation::Digest { node, applied_index, digest } => match self.digests.get(applied_index) {
                None => {
                    self.digests.insert(*applied_index, (*digest, *node));
                    None
                }
                Some((first, owner)) if first != digest => Some(format!(
                    "nodes {owner} and {node} have different state machines after applying up to index {applied_index} (digests {first:#x} and {digest:#x})"
                )),
                Some(_) => None,
            },
            _ => None,
        }
    }
}
