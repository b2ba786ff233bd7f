//! A deliberately simple sequential model of tenure's replicated state machine (sessions,
//! elections with fencing tokens, fenced keys), written from DESIGN's description and the
//! documented `Command`/`Response` contract, independently of `tenure_core::sm::machine`.
//!
//! The linearizability checker replays the canonical log through it and compares every
//! response and leader change with what the nodes produced. Plain vectors and linear scans:
//! it is meant to be obviously right, not fast.

use std::collections::BTreeMap;

use tenure_core::sm::{
    Command, FencedValue, LeaderChange, LeaderInfo, Quota, RequestId, Response, SessionId, SmError,
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
    /// The highest token of any deleted election: a new election's first token is above it.
    floor: u64,
    /// Who granted each session, created each election and last wrote each key, for
    /// commands charged to a principal.
    session_owner: BTreeMap<SessionId, String>,
    election_owner: BTreeMap<String, String>,
    key_owner: BTreeMap<String, String>,
}

/// The principal a command is charged to, and its quota.
type Charge<'a> = Option<(&'a str, &'a Quota)>;

/// The charge of the outermost `Charged` layer of `command`.
fn charge_of(command: &Command) -> Charge<'_> {
    match command {
        Command::Charged {
            principal, quota, ..
        } => Some((principal, quota)),
        Command::Sealed { command, .. } => charge_of(command),
        _ => None,
    }
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
            if let Some(refusal) = self.not_owner(session, charge_of(command)) {
                return (Response::Rejected(refusal), Vec::new());
            }
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
        let (mut response, changes) = self.apply(index, command);
        // A grant's nonce is remembered only while its session lives: a quota refusal of a
        // grant with a nonce may be the retry of one that took effect, so it is not definite.
        if let (
            RequestId::Grant { .. },
            Response::Rejected(SmError::QuotaExceeded { definite, .. }),
        ) = (id, &mut response)
        {
            *definite = false;
        }
        let read = command.unsealed().is_read();
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
        let response = match self.apply_inner(index, command, None, &mut changes) {
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

    /// `NotOwner` if `session` belongs to a principal other than the one charged.
    fn not_owner(&self, session: SessionId, charge: Charge<'_>) -> Option<SmError> {
        let (principal, _) = charge?;
        let owner = self.session_owner.get(&session)?;
        (owner != principal).then_some(SmError::NotOwner(session))
    }

    /// What `principal` holds: (sessions, elections, keys, key bytes).
    fn usage(&self, principal: &str) -> [u64; 4] {
        let mine = |owner: &String| owner == principal;
        let sessions = self.session_owner.values().filter(|o| mine(o)).count() as u64;
        let elections = self.election_owner.values().filter(|o| mine(o)).count() as u64;
        let keys: Vec<&String> = self
            .key_owner
            .iter()
            .filter(|(_, o)| mine(o))
            .map(|(k, _)| k)
            .collect();
        let bytes = keys
            .iter()
            .map(|k| (k.len() + self.fenced[*k].value.len()) as u64)
            .sum();
        [sessions, elections, keys.len() as u64, bytes]
    }

    /// `QuotaExceeded` for the first quota (sessions, elections, keys, key bytes) that the
    /// charged principal would exceed holding `usage`.
    fn over_quota(charge: Charge<'_>, usage: [u64; 4]) -> Result<(), SmError> {
        let Some((principal, quota)) = charge else {
            return Ok(());
        };
        let limits = [quota.sessions, quota.elections, quota.keys, quota.key_bytes];
        let names = ["sessions", "elections", "keys", "key_bytes"];
        for i in 0..4 {
            if usage[i] > limits[i] {
                return Err(SmError::QuotaExceeded {
                    principal: principal.to_string(),
                    quota: names[i].to_string(),
                    limit: limits[i],
                    definite: true,
                });
            }
        }
        Ok(())
    }

    /// The fence a `FencedPut` or `DeleteKey` must pass: the election exists and issued
    /// the token, the key belongs to the election and never took a higher token, and no
    /// newer leader exists.
    fn fence(&self, key: &str, election: &str, token: u64) -> Result<(), SmError> {
        let latest = self
            .elections
            .get(election)
            .map(|e| e.token)
            .ok_or_else(|| SmError::UnknownElection(election.to_string()))?;
        if token == 0 || token > latest {
            return Err(SmError::TokenNotIssued {
                election: election.to_string(),
                token,
                latest,
            });
        }
        if let Some(current) = self.fenced.get(key) {
            // A key belongs to the election of its first accepted write.
            if current.election != election {
                return Err(SmError::WrongElection {
                    key: key.to_string(),
                    bound: current.election.clone(),
                    election: election.to_string(),
                });
            }
            if current.token > token {
                return Err(SmError::StaleToken {
                    token,
                    current: current.token,
                });
            }
        }
        // Below the election's latest token: a newer leader exists.
        if token < latest {
            return Err(SmError::TokenSuperseded {
                election: election.to_string(),
                token,
                current: latest,
            });
        }
        Ok(())
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
        charge: Charge<'_>,
        changes: &mut Vec<LeaderChange>,
    ) -> Result<Response, SmError> {
        // A command acting for a session owned by another principal is refused first.
        let acting = match command {
            Command::Revoke { session }
            | Command::Campaign { session, .. }
            | Command::Resign { session, .. }
            | Command::Transfer { from: session, .. } => Some(*session),
            _ => None,
        };
        if let Some(refusal) = acting.and_then(|s| self.not_owner(s, charge)) {
            return Err(refusal);
        }
        match command {
            // The simulated clients never seal commands (session secrets are checked by the
            // core's own tests and the server's); the model applies what is inside.
            Command::Sealed { command, .. } => self.apply_inner(index, command, charge, changes),
            // The outermost charge counts.
            Command::Charged {
                principal,
                quota,
                command,
            } => {
                let charge = charge.or(Some((principal.as_str(), quota)));
                self.apply_inner(index, command, charge, changes)
            }
            // The member directory does not touch sessions, elections or keys.
            Command::SetMember { .. } => Ok(Response::MemberSet),
            Command::Grant { ttl_ticks } => {
                if let Some((principal, _)) = charge {
                    let mut usage = self.usage(principal);
                    usage[0] += 1;
                    Self::over_quota(charge, usage)?;
                    self.session_owner.insert(index, principal.to_string());
                }
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
                self.session_owner.remove(session);
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
                if !self.elections.contains_key(election) {
                    if let Some((principal, _)) = charge {
                        let mut usage = self.usage(principal);
                        usage[1] += 1;
                        Self::over_quota(charge, usage)?;
                        self.election_owner
                            .insert(election.clone(), principal.to_string());
                    }
                    // A new election starts above every deleted one's tokens.
                    let fresh = Election {
                        token: self.floor,
                        queue: Vec::new(),
                    };
                    self.elections.insert(election.clone(), fresh);
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
                self.fence(key, election, *token)?;
                if let Some((principal, _)) = charge {
                    let mut usage = self.usage(principal);
                    if self.key_owner.get(key).is_some_and(|o| o == principal) {
                        usage[3] -= (key.len() + self.fenced[key].value.len()) as u64;
                    } else {
                        usage[2] += 1;
                    }
                    usage[3] += (key.len() + value.len()) as u64;
                    Self::over_quota(charge, usage)?;
                }
                // A key is held by its last writer.
                match charge {
                    Some((principal, _)) => {
                        self.key_owner.insert(key.clone(), principal.to_string());
                    }
                    None => {
                        self.key_owner.remove(key);
                    }
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
            Command::DeleteKey {
                key,
                election,
                token,
            } => {
                self.fence(key, election, *token)?;
                self.key_owner.remove(key);
                Ok(Response::Deleted {
                    existed: self.fenced.remove(key).is_some(),
                })
            }
            Command::DeleteElection { election } => {
                let Some(e) = self.elections.get(election) else {
                    return Ok(Response::Deleted { existed: false });
                };
                if !e.queue.is_empty() {
                    return Err(SmError::ElectionInUse {
                        election: election.clone(),
                        candidates: e.queue.len(),
                    });
                }
                self.floor = self.floor.max(e.token);
                self.elections.remove(election);
                self.election_owner.remove(election);
                Ok(Response::Deleted { existed: true })
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
