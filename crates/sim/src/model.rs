//! A deliberately simple sequential model of tenure's replicated state machine (sessions,
//! elections with fencing tokens, fenced keys), written from DESIGN's description and the
//! documented `Command`/`Response` contract, independently of `tenure_core::sm::machine`.
//!
//! The linearizability checker replays the canonical log through it and compares every
//! response and leader change with what the nodes produced. Plain vectors and linear scans:
//! it is meant to be obviously right, not fast.

use std::collections::BTreeMap;

use tenure_core::sm::{
    Command, FencedValue, LeaderChange, LeaderInfo, RequestId, Response, SessionId, SmError,
};
use tenure_core::types::Index;

/// One election in the model.
#[derive(Clone, Debug, Default)]
struct Election {
    /// Latest token handed out; starts at 0 and rises by one each time a new candidate
    /// heads the queue.
    token: u64,
    /// Candidates in FIFO order: (session, value). The head leads.
    queue: Vec<(SessionId, Vec<u8>)>,
}

impl Election {
    fn leader(&self) -> Option<LeaderInfo> {
        self.queue.first().map(|(session, value)| LeaderInfo {
            session: *session,
            value: value.clone(),
            token: self.token,
        })
    }
}

/// The model's state.
#[derive(Clone, Debug, Default)]
pub struct Model {
    sessions: Vec<SessionId>,
    elections: BTreeMap<String, Election>,
    fenced: BTreeMap<String, FencedValue>,
    /// Every result of a request with an id, never forgotten: a retry of a request whose
    /// session still lives returns it (Raft dissertation §6.3). The simulated clients keep
    /// one request in flight per session, far below what the real state machine remembers.
    results: BTreeMap<RequestId, Response>,
}

impl Model {
    /// Applies the entry at `index`, which carries a client request `id` if `Some`.
    pub fn apply_entry(
        &mut self,
        index: Index,
        id: Option<RequestId>,
        command: &Command,
    ) -> (Response, Vec<LeaderChange>) {
        let Some(id) = id else {
            return self.apply(index, command);
        };
        let owner = match id {
            RequestId::Session { session, .. } => Some(session),
            RequestId::Grant { .. } => match self.results.get(&id) {
                Some(Response::Granted { session, .. }) => Some(*session),
                _ => None,
            },
        };
        if let Some(session) = owner {
            if !self.alive(session) {
                // The session's results went with it; a request on it is refused.
                if matches!(id, RequestId::Session { .. }) {
                    return (
                        Response::Rejected(SmError::UnknownSession(session)),
                        Vec::new(),
                    );
                }
            } else if let Some(first) = self.results.get(&id) {
                return (first.clone(), Vec::new());
            }
        }
        let (response, changes) = self.apply(index, command);
        let read = matches!(command, Command::Get { .. } | Command::Leader { .. });
        let keep = match (id, &response) {
            (RequestId::Grant { .. }, Response::Granted { .. }) => true,
            (RequestId::Grant { .. }, _) => false,
            (RequestId::Session { session, .. }, _) => !read && self.alive(session),
        };
        if keep {
            self.results.insert(id, response.clone());
        }
        (response, changes)
    }

    /// Applies the command of the entry at `index`; returns the expected response and the
    /// leader changes it causes.
    pub fn apply(&mut self, index: Index, command: &Command) -> (Response, Vec<LeaderChange>) {
        let mut changes = Vec::new();
        let response = match self.apply_inner(index, command, &mut changes) {
            Ok(r) => r,
            Err(e) => Response::Rejected(e),
        };
        (response, changes)
    }

    /// The answer to a read (`Get` or `Leader`) in the current state, as a read served at
    /// this point of the log must get it. Panics for any other command.
    pub fn query(&self, read: &Command) -> Response {
        match read {
            Command::Get { key } => Response::Value(self.fenced.get(key).cloned()),
            Command::Leader { election } => match self.elections.get(election) {
                Some(e) => Response::LeaderIs(e.leader()),
                None => Response::Rejected(SmError::UnknownElection(election.clone())),
            },
            other => panic!("not a read: {other:?}"),
        }
    }

    fn alive(&self, session: SessionId) -> bool {
        self.sessions.contains(&session)
    }

    /// Runs `change` on an election's queue and records a leader change if the head moved;
    /// a new head gets the next token.
    fn with_queue(
        &mut self,
        name: &str,
        index: Index,
        changes: &mut Vec<LeaderChange>,
        change: impl FnOnce(&mut Vec<(SessionId, Vec<u8>)>),
    ) {
        let election = self.elections.entry(name.to_string()).or_default();
        let before = election.queue.first().map(|c| c.0);
        change(&mut election.queue);
        let after = election.queue.first().map(|c| c.0);
        if before != after {
            if after.is_some() {
                election.token += 1;
            }
            changes.push(LeaderChange {
                election: name.to_string(),
                leader: election.leader(),
                index,
            });
        }
    }

    fn apply_inner(
        &mut self,
        index: Index,
        command: &Command,
        changes: &mut Vec<LeaderChange>,
    ) -> Result<Response, SmError> {
        match command {
            // The simulated clients never seal commands (session secrets are checked by the
            // core's own tests and the server's); the model applies what is inside.
            Command::Sealed { command, .. } => self.apply_inner(index, command, changes),
            // The member directory does not touch sessions, elections or keys.
            Command::SetMember { .. } => Ok(Response::MemberSet),
            Command::Grant { ttl_ticks } => {
                self.sessions.push(index);
                Ok(Response::Granted {
                    session: index,
                    ttl_ticks: *ttl_ticks,
                })
            }
            Command::Revoke { session }
            | Command::Expire { session }
            | Command::Release { session } => {
                if !self.alive(*session) {
                    return Err(SmError::UnknownSession(*session));
                }
                self.sessions.retain(|s| s != session);
                let names: Vec<String> = self.elections.keys().cloned().collect();
                for name in names {
                    self.with_queue(&name, index, changes, |q| q.retain(|c| c.0 != *session));
                }
                Ok(Response::Ended { session: *session })
            }
            Command::Checkpoint { .. } => Ok(Response::Checkpointed),
            Command::Campaign {
                election,
                session,
                value,
            } => {
                if !self.alive(*session) {
                    return Err(SmError::UnknownSession(*session));
                }
                let queued = self
                    .elections
                    .get(election)
                    .and_then(|e| e.queue.iter().position(|c| c.0 == *session));
                if let Some(position) = queued {
                    let token = self.elections.get(election).map_or(0, |e| e.token);
                    return Ok(Response::Campaigned {
                        leader_token: (position == 0).then_some(token),
                        position,
                    });
                }
                let value = value.clone();
                self.with_queue(election, index, changes, |q| q.push((*session, value)));
                let e = &self.elections[election];
                let position = e.queue.len() - 1;
                Ok(Response::Campaigned {
                    leader_token: (position == 0).then_some(e.token),
                    position,
                })
            }
            Command::Resign { election, session } => {
                let e = self
                    .elections
                    .get(election)
                    .ok_or_else(|| SmError::UnknownElection(election.clone()))?;
                if !e.queue.iter().any(|c| c.0 == *session) {
                    return Err(SmError::NotCandidate {
                        election: election.clone(),
                        session: *session,
                    });
                }
                self.with_queue(election, index, changes, |q| q.retain(|c| c.0 != *session));
                Ok(Response::Resigned)
            }
            Command::Transfer { election, from, to } => {
                let e = self
                    .elections
                    .get(election)
                    .ok_or_else(|| SmError::UnknownElection(election.clone()))?;
                if e.queue.first().map(|c| c.0) != Some(*from) {
                    return Err(SmError::NotLeader {
                        election: election.clone(),
                        session: *from,
                    });
                }
                if !e.queue.iter().any(|c| c.0 == *to) {
                    return Err(SmError::NotCandidate {
                        election: election.clone(),
                        session: *to,
                    });
                }
                // `to` moves to the head; `from` becomes second.
                self.with_queue(election, index, changes, |q| {
                    let i = q.iter().position(|c| c.0 == *to).expect("checked above");
                    let moved = q.remove(i);
                    q.insert(0, moved);
                });
                Ok(Response::Transferred {
                    token: self.elections[election].token,
                })
            }
            Command::FencedPut {
                key,
                value,
                election,
                token,
            } => {
                let latest = self
                    .elections
                    .get(election)
                    .map(|e| e.token)
                    .ok_or_else(|| SmError::UnknownElection(election.clone()))?;
                if *token == 0 || *token > latest {
                    return Err(SmError::TokenNotIssued {
                        election: election.clone(),
                        token: *token,
                        latest,
                    });
                }
                if let Some(current) = self.fenced.get(key) {
                    // A key belongs to the election of its first accepted write.
                    if current.election != *election {
                        return Err(SmError::WrongElection {
                            key: key.clone(),
                            bound: current.election.clone(),
                            election: election.clone(),
                        });
                    }
                    if current.token > *token {
                        return Err(SmError::StaleToken {
                            token: *token,
                            current: current.token,
                        });
                    }
                }
                // Below the election's latest token: a newer leader exists.
                if *token < latest {
                    return Err(SmError::TokenSuperseded {
                        election: election.clone(),
                        token: *token,
                        current: latest,
                    });
                }
                let stored = FencedValue {
                    value: value.clone(),
                    election: election.clone(),
                    token: *token,
                    index,
                };
                self.fenced.insert(key.clone(), stored);
                Ok(Response::Put)
            }
            Command::Get { key } => Ok(Response::Value(self.fenced.get(key).cloned())),
            Command::Leader { election } => match self.elections.get(election) {
                Some(e) => Ok(Response::LeaderIs(e.leader())),
                None => Err(SmError::UnknownElection(election.clone())),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn campaign(election: &str, session: SessionId) -> Command {
        Command::Campaign {
            election: election.into(),
            session,
            value: vec![session as u8],
        }
    }

    #[test]
    fn tokens_rise_with_every_new_leader_and_stale_writes_are_rejected() {
        let mut m = Model::default();
        m.apply(1, &Command::Grant { ttl_ticks: 50 });
        m.apply(2, &Command::Grant { ttl_ticks: 50 });
        let (r, changes) = m.apply(3, &campaign("e", 1));
        assert_eq!(
            r,
            Response::Campaigned {
                leader_token: Some(1),
                position: 0
            }
        );
        assert_eq!(changes.len(), 1);
        let (r, _) = m.apply(4, &campaign("e", 2));
        assert_eq!(
            r,
            Response::Campaigned {
                leader_token: None,
                position: 1
            }
        );
        let put = |token| Command::FencedPut {
            key: "k".into(),
            value: vec![],
            election: "e".into(),
            token,
        };
        assert_eq!(m.apply(5, &put(1)).0, Response::Put);
        let (r, changes) = m.apply(6, &Command::Expire { session: 1 });
        assert_eq!(r, Response::Ended { session: 1 });
        assert_eq!(
            changes[0].leader.as_ref().map(|l| (l.session, l.token)),
            Some((2, 2))
        );
        assert_eq!(m.apply(7, &put(2)).0, Response::Put);
        assert_eq!(
            m.apply(8, &put(1)).0,
            Response::Rejected(SmError::StaleToken {
                token: 1,
                current: 2
            })
        );
    }
}
