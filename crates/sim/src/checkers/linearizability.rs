//! Linearizability of fenced-key and election operations — Herlihy & Wing, "Linearizability:
//! A Correctness Condition for Concurrent Objects" (1990), with the log order as the
//! linearization. Writes take a log position; a read (`Get`, `Leader`) is served by the
//! leader without one (Raft dissertation §6.4) and is answered with the index whose state it
//! saw, so it is placed at that index.
//!
//! Conditions:
//! - sequential specification: replaying the canonical log through the simple model in
//!   `model.rs` must give exactly the responses and leader changes the nodes produced, and the
//!   response a client received must be the one at its entry's position; a read's response
//!   must be the model's answer in the state after its index;
//! - real-time order: if operation A's response reached its client before operation B was
//!   invoked, B comes after A: a write's index is above A's, a read's index is at least A's
//!   (a read sees everything completed before it started, and never an older state than a
//!   read that completed before it started).

use std::collections::BTreeMap;

use tenure_core::sm::{Command, Response};
use tenure_core::types::Index;

use super::{Checker, View};
use crate::model::Model;
use crate::observe::{ClientId, Observation, OpId};
use crate::time::{fmt_time, SimTimeUs};

/// What a read asks, as a map key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ReadKey {
    Leader(String),
    Get(String),
}

impl ReadKey {
    fn of(read: &Command) -> Option<ReadKey> {
        match read {
            Command::Leader { election } => Some(ReadKey::Leader(election.clone())),
            Command::Get { key } => Some(ReadKey::Get(key.clone())),
            _ => None,
        }
    }

    fn command(&self) -> Command {
        match self {
            ReadKey::Leader(election) => Command::Leader {
                election: election.clone(),
            },
            ReadKey::Get(key) => Command::Get { key: key.clone() },
        }
    }
}

/// A read served without a log entry, waiting for the canonical sequence to reach its index.
struct PendingRead {
    op: OpId,
    client: ClientId,
    read: ReadKey,
    index: Index,
    response: Response,
}

/// The model, the canonical responses, and the completions in time order.
#[derive(Default)]
pub struct Linearizability {
    model: Model,
    /// Canonical response per index.
    responses: BTreeMap<Index, Response>,
    /// Client responses whose index the canonical sequence has not reached yet.
    unverified: BTreeMap<Index, (OpId, Response)>,
    /// Invocation time of each operation in flight, and its command if it is a read.
    invoked: BTreeMap<OpId, (SimTimeUs, Option<ReadKey>)>,
    /// Completions in time order: (time, index, highest index completed so far).
    completions: Vec<(SimTimeUs, Index, Index)>,
    /// Last index of the canonical sequence replayed.
    canonical_through: Index,
    /// For every read any command or read named: its answer from each index on where it
    /// changed (the first entry, at 0, is the answer before anything happened).
    answers: BTreeMap<ReadKey, BTreeMap<Index, Response>>,
    /// Reads whose index the canonical sequence has not reached yet.
    pending_reads: Vec<PendingRead>,
}

impl Linearizability {
    /// Highest index among operations completed strictly before `time_us`.
    fn completed_before(&self, time_us: SimTimeUs) -> Option<(Index, SimTimeUs)> {
        let n = self.completions.partition_point(|(t, _, _)| *t < time_us);
        let (t, _, max) = *self.completions.get(n.checked_sub(1)?)?;
        Some((max, t))
    }

    /// Starts following `read`'s answer (it cannot have changed before anything named it).
    fn follow(&mut self, read: ReadKey) {
        self.answers.entry(read).or_insert_with_key(|read| {
            BTreeMap::from([(0, Model::default().query(&read.command()))])
        });
    }

    /// The reads whose answer `command` may change.
    fn reads_named(command: &Command) -> Option<ReadKey> {
        match command.unsealed() {
            Command::Campaign { election, .. }
            | Command::Resign { election, .. }
            | Command::Transfer { election, .. }
            | Command::DeleteElection { election }
            | Command::Leader { election } => Some(ReadKey::Leader(election.clone())),
            Command::FencedPut { key, .. }
            | Command::DeleteKey { key, .. }
            | Command::Get { key } => Some(ReadKey::Get(key.clone())),
            _ => None,
        }
    }

    /// The model's answer to `read` in the state after `index` (already replayed).
    fn answer_at(&self, read: &ReadKey, index: Index) -> Response {
        match self.answers.get(read) {
            Some(history) => history
                .range(..=index)
                .next_back()
                .map(|(_, r)| r.clone())
                .expect("every history starts at 0"),
            None => Model::default().query(&read.command()),
        }
    }

    fn check_read(&self, r: &PendingRead) -> Option<String> {
        let expected = self.answer_at(&r.read, r.index);
        (expected != r.response).then(|| {
            format!(
                "op {} of client {} read {:?} at index {} and received {:?}; the sequential model says {:?} there",
                r.op, r.client, r.read, r.index, r.response, expected
            )
        })
    }
}

impl Checker for Linearizability {
    fn name(&self) -> &'static str {
        "linearizability"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        match observation {
            Observation::Canonical(entry) => {
                let (expected, changes) =
                    self.model
                        .apply_entry(entry.index, entry.request, &entry.command);
                if expected != *refused_alike(&entry.response) {
                    return Some(format!(
                        "index {}: {:?} answered {:?}; the sequential model says {:?}",
                        entry.index, entry.command, entry.response, expected
                    ));
                }
                if changes != entry.leader_changes {
                    return Some(format!(
                        "index {}: {:?} changed leaders {:?}; the sequential model says {:?}",
                        entry.index, entry.command, entry.leader_changes, changes
                    ));
                }
                if let Some((op, got)) = self.unverified.remove(&entry.index) {
                    if got != entry.response {
                        return Some(format!(
                            "op {op} received {got:?} for index {} whose entry answered {:?}",
                            entry.index, entry.response
                        ));
                    }
                }
                self.responses.insert(entry.index, entry.response.clone());
                self.canonical_through = entry.index;
                if let Some(read) = Self::reads_named(&entry.command) {
                    self.follow(read);
                }
                let reads: Vec<ReadKey> = self.answers.keys().cloned().collect();
                for read in reads {
                    let now = self.model.query(&read.command());
                    let history = self.answers.get_mut(&read).expect("listed above");
                    if history.last_key_value().map(|(_, r)| r) != Some(&now) {
                        history.insert(entry.index, now);
                    }
                }
                let due: Vec<PendingRead> = {
                    let (due, wait) = std::mem::take(&mut self.pending_reads)
                        .into_iter()
                        .partition(|r| r.index <= entry.index);
                    self.pending_reads = wait;
                    due
                };
                due.iter().find_map(|r| self.check_read(r))
            }
            Observation::OpInvoked { op, command, .. } => {
                let read = ReadKey::of(command.unsealed());
                self.invoked.insert(*op, (view.now_us, read));
                None
            }
            Observation::OpCompleted {
                op,
                client,
                position,
                response,
            } => {
                let (invoked_us, read) = self.invoked.remove(op)?;
                let (Some(index), Some(response)) = (position, response) else {
                    return None;
                };
                if let Some(read) = read {
                    if let Some((before, at)) = self.completed_before(invoked_us) {
                        if before > *index {
                            return Some(format!(
                                "op {op} of client {client} was invoked at {} and read {read:?} at index {index}, but an operation completed at {} had already taken index {before}",
                                fmt_time(invoked_us),
                                fmt_time(at)
                            ));
                        }
                    }
                    let max = self.completions.last().map_or(*index, |c| c.2.max(*index));
                    self.completions.push((view.now_us, *index, max));
                    self.follow(read.clone());
                    let r = PendingRead {
                        op: *op,
                        client: *client,
                        read,
                        index: *index,
                        response: response.clone(),
                    };
                    if *index <= self.canonical_through {
                        return self.check_read(&r);
                    }
                    self.pending_reads.push(r);
                    return None;
                }
                if let Some((before, at)) = self.completed_before(invoked_us) {
                    if before >= *index {
                        return Some(format!(
                            "op {op} of client {client} was invoked at {} and took index {index}, but an operation completed at {} had already taken index {before}",
                            fmt_time(invoked_us),
                            fmt_time(at)
                        ));
                    }
                }
                let max = self.completions.last().map_or(*index, |c| c.2.max(*index));
                self.completions.push((view.now_us, *index, max));
                match self.responses.get(index) {
                    Some(canonical) if canonical != response => Some(format!(
                        "op {op} of client {client} received {response:?} for index {index} whose entry answered {canonical:?}"
                    )),
                    Some(_) => None,
                    None => {
                        self.unverified.insert(*index, (*op, response.clone()));
                        None
                    }
                }
            }
            _ => None,
        }
    }
}

/// A request on a session that is gone changes nothing, whichever refusal it gets: whether
/// that refusal may call itself definite (`UnknownSession`) or must not (`SessionEnded`, an
/// earlier attempt may have taken effect) is judged by the exact-outcomes checker, which
/// knows the request's history. Here both are the model's `UnknownSession`.
fn refused_alike(response: &Response) -> std::borrow::Cow<'_, Response> {
    match response {
        Response::Rejected(tenure_core::sm::SmError::SessionEnded { session, .. }) => {
            std::borrow::Cow::Owned(Response::Rejected(
                tenure_core::sm::SmError::UnknownSession(*session),
            ))
        }
        other => std::borrow::Cow::Borrowed(other),
    }
}
