//! Log Matching — Raft §5.3 and Figure 3: "if two logs contain an entry with the same index
//! and term, then the logs are identical in all entries up through the given index".
//!
//! Every entry a node appends is fingerprinted with a chain hash covering the whole log up to
//! it (see `mirror`). The first chain hash seen for an (index, term) is recorded; a different
//! one from any node, at any time, means two logs agree on an entry but differ before it (or
//! in the entry itself).

use std::collections::BTreeMap;

use tenure_core::types::{Index, NodeId, Term};

use super::{Checker, View};
use crate::observe::Observation;

/// First chain hash seen per (index, term), and who had it.
#[derive(Default)]
pub struct LogMatching {
    seen: BTreeMap<(Index, Term), (u64, NodeId)>,
}

impl Checker for LogMatching {
    fn name(&self) -> &'static str {
        "log-matching"
    }

    fn observe(&mut self, observation: &Observation, _view: &View<'_>) -> Option<String> {
        let Observation::Appended { node, entries } = observation else {
            return None;
        };
        for e in entries {
            let Some(chain) = e.chain else { continue };
            match self.seen.get(&(e.index, e.term)) {
                Some((first, owner)) if *first != chain => {
                    return Some(format!(
                        "nodes {owner} and {node} both hold an entry at index {} in term {} but their logs differ up to it",
                        e.index, e.term
                    ));
                }
                Some(_) => {}
                None => {
                    self.seen.insert((e.index, e.term), (chain, *node));
                }
            }
        }
        None
    }
}
