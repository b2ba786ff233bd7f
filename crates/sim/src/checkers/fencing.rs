//! Fencing — DESIGN rule 3: "for each election, tokens handed out strictly increase; every
//! protected store that tenure ships rejects a write whose token is below the highest it
//! accepted, in the same atomic step as the write" (and the design brief's story: the store
//! has seen token 43, so the old leader's write with 42 is rejected).
//!
//! Judged on the canonical applied sequence with the checker's own model, not on the node's
//! answer: each leader change must carry a token above the election's previous one; the
//! tokens in `Campaigned` and `Transferred` answers must be the election's current token; and
//! a `FencedPut` that was accepted must name the election the key belongs to (that of its
//! first accepted write) and carry exactly the election's current token: not lower (a
//! newer leader exists, whether or not it wrote the key yet) and not one never handed out. A
//! `DeleteKey` that was accepted is held to the same rules. Deleted elections stay in the
//! checker's memory, so that one created again under the same name must go on above the
//! tokens its namesake handed out.

use std::collections::BTreeMap;

use tenure_core::sm::{Command, Response};

use super::{Checker, View};
use crate::observe::Observation;

/// The checker's model of tokens and fenced keys.
#[derive(Default)]
pub struct Fencing {
    /// Latest token handed out per election.
    tokens: BTreeMap<String, u64>,
    /// Per key: the election it belongs to (its first accepted write's) and the highest
    /// token accepted for it.
    keys: BTreeMap<String, (String, u64)>,
}

impl Checker for Fencing {
    fn name(&self) -> &'static str {
        "fencing"
    }

    fn observe(&mut self, observation: &Observation, _view: &View<'_>) -> Option<String> {
        let Observation::Canonical(entry) = observation else {
            return None;
        };
        for change in &entry.leader_changes {
            let Some(leader) = &change.leader else {
                continue;
            };
            let previous = self.tokens.get(&change.election).copied();
            if previous.is_some_and(|p| leader.token <= p) {
                return Some(format!(
                    "election {:?} handed token {} to session {} at index {} after token {}: tokens must strictly increase",
                    change.election,
                    leader.token,
                    leader.session,
                    entry.index,
                    previous.unwrap_or(0)
                ));
            }
            self.tokens.insert(change.election.clone(), leader.token);
        }
        if entry.replay_of.is_some() {
            // A retry answered with its first result changed nothing; that result was
            // checked when it was first applied.
            return None;
        }
        match (entry.command.unsealed(), &entry.response) {
            (
                Command::Campaign { election, .. },
                Response::Campaigned {
                    leader_token: Some(token),
                    ..
                },
            )
            | (Command::Transfer { election, .. }, Response::Transferred { token }) => {
                let current = self.tokens.get(election).copied();
                if current != Some(*token) {
                    return Some(format!(
                        "index {}: {election:?} answered token {token} but the election's latest token is {current:?}",
                        entry.index
                    ));
                }
            }
            (
                Command::FencedPut {
                    key,
                    election,
                    token,
                    ..
                },
                Response::Put,
            )
            | (
                Command::DeleteKey {
                    key,
                    election,
                    token,
                },
                Response::Deleted { .. },
            ) => {
                let (bound, highest) = match self.keys.get(key) {
                    Some((bound, highest)) => (Some(bound.as_str()), *highest),
                    None => (None, 0),
                };
                if bound.is_some_and(|b| b != election) {
                    return Some(format!(
                        "index {}: write to {key:?} accepted from election {election:?}, but the key belongs to {:?}",
                        entry.index,
                        bound.unwrap_or_default()
                    ));
                }
                if *token < highest {
                    return Some(format!(
                        "index {}: stale write accepted: key {key:?} had accepted token {highest}, the write used token {token}",
                        entry.index
                    ));
                }
                let issued = self.tokens.get(election).copied().unwrap_or(0);
                if *token > issued {
                    return Some(format!(
                        "index {}: write to {key:?} accepted with token {token}, which {election:?} never handed out (latest {issued})",
                        entry.index
                    ));
                }
                if *token < issued {
                    return Some(format!(
                        "index {}: superseded write accepted: {election:?} had handed out token {issued}, the write to {key:?} used token {token}",
                        entry.index
                    ));
                }
                if matches!(entry.response, Response::Put) {
                    self.keys.insert(key.clone(), (election.clone(), *token));
                } else {
                    // A removed key belongs to nobody: its next write binds it afresh.
                    self.keys.remove(key);
                }
            }
            _ => {}
        }
        None
    }
}
