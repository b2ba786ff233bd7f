//! Leader Completeness — Raft §5.4 and Figure 3: "if a log entry is committed in a given
//! term, then that entry will be present in the logs of the leaders for all higher-numbered
//! terms". With it, DESIGN rule 2: a committed entry is never lost or changed.
//!
//! Committed entries are tracked from the nodes' commit indices: when a node's commit index
//! moves over an entry of its log, that entry is committed, "in" the node's current term (an
//! upper bound on the term of the leader that committed it, so the check never fires early).
//! Checked both ways:
//! - when a node becomes leader of term T, its log must hold every entry committed in a
//!   term below T — one comparison of chain hashes at the highest such index covers them all;
//! - when an entry is committed in term T, every current leader of a term above T must hold it.
//!
//! An entry reported committed with a different term or chain hash than before is a committed
//! entry that changed.

use tenure_core::node::Role;
use tenure_core::types::{Index, NodeId, Term};

use super::{Checker, View};
use crate::mirror::{ChainedEntry, Lookup};
use crate::observe::Observation;

#[derive(Clone, Copy, Debug)]
struct Committed {
    entry: ChainedEntry,
    /// Lowest term of a node seen committing it.
    in_term: Term,
}

/// Every committed entry, index `i` at position `i - 1`.
#[derive(Default)]
pub struct LeaderCompleteness {
    committed: Vec<Committed>,
}

impl LeaderCompleteness {
    fn get(&self, index: Index) -> Option<&Committed> {
        index
            .checked_sub(1)
            .and_then(|i| self.committed.get(i as usize))
    }

    /// Checks that `node`'s log holds the committed entry at `index`.
    fn holds(&self, node: NodeId, index: Index, view: &View<'_>) -> Result<(), String> {
        let Some(c) = self.get(index) else {
            return Ok(());
        };
        let Some(slot) = view.nodes.get(&node) else {
            return Ok(());
        };
        match slot.mirror.get(index) {
            // Compacted entries are in the node's snapshot, which holds only committed state.
            Lookup::Compacted => Ok(()),
            Lookup::Missing => Err(format!(
                "its log ends at index {} and lacks committed entry {} (term {}, committed in term {})",
                slot.mirror.last_index(),
                index,
                c.entry.term,
                c.in_term
            )),
            Lookup::Entry(e) => {
                let differs = e.term != c.entry.term || matches!((e.chain, c.entry.chain), (Some(a), Some(b)) if a != b);
                if differs {
                    Err(format!(
                        "its log differs from the committed log at or before index {index} (it has term {} there, committed term {})",
                        e.term, c.entry.term
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    fn record(&mut self, node: NodeId, term: Term, entries: &[ChainedEntry]) -> Option<String> {
        for e in entries {
            let next = self.committed.len() as Index + 1;
            if e.index == next {
                self.committed.push(Committed {
                    entry: *e,
                    in_term: term,
                });
                continue;
            }
            if e.index > next {
                // The node holds entries whose predecessors were never seen committed; they
                // were committed by a node whose reports the simulator missed (it cannot be
                // checked, so it is skipped rather than guessed).
                continue;
            }
            let Some(c) = self.committed.get_mut((e.index - 1) as usize) else {
                continue;
            };
            let changed = c.entry.term != e.term
                || matches!((c.entry.chain, e.chain), (Some(a), Some(b)) if a != b);
            if changed {
                return Some(format!(
                    "node {node} committed index {} with term {} but term {} was committed there before: a committed entry changed",
                    e.index, e.term, c.entry.term
                ));
            }
            c.in_term = c.in_term.min(term);
            if c.entry.chain.is_none() {
                c.entry.chain = e.chain;
            }
        }
        None
    }
}

impl Checker for LeaderCompleteness {
    fn name(&self) -> &'static str {
        "leader-completeness"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        match observation {
            Observation::Committed { node, entries } => {
                let term = view
                    .nodes
                    .get(node)
                    .and_then(|s| s.status.as_ref())
                    .map_or(Term::MAX, |s| s.term);
                if let Some(v) = self.record(*node, term, entries) {
                    return Some(v);
                }
                let last = entries.last()?;
                let in_term = self.get(last.index)?.in_term;
                for slot in view.nodes.values() {
                    let Some(status) = slot.status.as_ref() else {
                        continue;
                    };
                    if status.role == Role::Leader && status.term > in_term && slot.is_up() {
                        if let Err(why) = self.holds(slot.id, last.index, view) {
                            return Some(format!(
                                "node {} leads term {}, but {why}",
                                slot.id, status.term
                            ));
                        }
                    }
                }
                None
            }
            Observation::Role {
                node,
                role: Role::Leader,
                term,
            } => {
                // The highest index committed in a term below this one.
                let index = self.committed.iter().rposition(|c| c.in_term < *term)? as Index + 1;
                self.holds(*node, index, view)
                    .err()
                    .map(|why| format!("node {node} became leader of term {term}, but {why}"))
            }
            _ => None,
        }
    }
}
