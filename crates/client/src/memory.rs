//! The `memory:` backend: the tenure cluster's election semantics in one process, for tests.
//!
//! Same contract as the cluster: sessions with a TTL that expire `TTL` after the last
//! keepalive was received (by this process's monotonic clock), a FIFO queue of candidates
//! per election whose head leads, a token that rises by one on every change of holder and is
//! never reset, an error for elections nobody ever campaigned in. Expiry is applied lazily
//! before every operation, and every waiter also wakes at the next expiry time, so no
//! background task is needed (a world may be shared by several tokio runtimes).
//!
//! `memory:` is one process-wide world; `memory:NAME` a separate world per name, so that
//! tests running in parallel do not meet.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc, watch};

use crate::{Error, LeaderEvent, LeaderInfo, Result};

/// Shortest TTL a session may ask for (the cluster's default bound).
const TTL_MIN: Duration = Duration::from_millis(100);
/// Longest TTL a session may ask for (the cluster's default bound).
const TTL_MAX: Duration = Duration::from_secs(3600);
/// Longest election name, in bytes (the cluster's default limit).
const ELECTION_NAME_BYTES_MAX: usize = 256;
/// Largest candidate value, in bytes (the cluster's default limit).
const VALUE_BYTES_MAX: usize = 64 * 1024;
/// How many leader changes an observer may fall behind before its stream fails.
const CHANGES_BUFFERED_MAX: usize = 1024;

#[derive(Debug)]
struct MemSession {
    ttl: Duration,
    /// Last keepalive receive time + TTL.
    expires_at: Instant,
    /// Elections this session is queued in, so that expiry can remove it.
    elections: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct MemElection {
    /// Candidates in arrival order; the head leads.
    queue: VecDeque<(u64, Vec<u8>)>,
    /// The current (or last) holder's token; 0 before the first leader.
    token: u64,
}

impl MemElection {
    fn leader(&self) -> Option<LeaderInfo> {
        self.queue.front().map(|(session, value)| LeaderInfo {
            session: *session,
            value: value.clone(),
            token: self.token,
        })
    }
}

#[derive(Debug, Default)]
struct State {
    sessions: BTreeMap<u64, MemSession>,
    elections: BTreeMap<String, MemElection>,
    next_session: u64,
    /// Counts state changes; plays the role of the cluster's log index.
    index: u64,
}

/// One in-process world of sessions and elections.
#[derive(Debug)]
pub(crate) struct World {
    state: Mutex<State>,
    /// Every change of leader, for observers.
    changes: broadcast::Sender<LeaderEvent>,
    /// Bumped on every change, for campaign waiters.
    version: watch::Sender<u64>,
}

/// The world named `name`, created if nobody holds it.
pub(crate) fn world(name: &str) -> Arc<World> {
    static WORLDS: OnceLock<Mutex<BTreeMap<String, Weak<World>>>> = OnceLock::new();
    let mut worlds = WORLDS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(w) = worlds.get(name).and_then(Weak::upgrade) {
        return w;
    }
    let w = Arc::new(World {
        state: Mutex::new(State {
            next_session: 1,
            ..State::default()
        }),
        changes: broadcast::channel(CHANGES_BUFFERED_MAX).0,
        version: watch::channel(0).0,
    });
    worlds.retain(|_, w| w.strong_count() > 0);
    worlds.insert(name.to_string(), Arc::downgrade(&w));
    w
}

impl World {
    /// The state with every session due by now expired. Every field is updated by single
    /// assignments, so a panic elsewhere cannot leave it half-changed: poison is ignored.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let due: Vec<u64> = st
            .sessions
            .iter()
            .filter(|(_, s)| s.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.remove_session(&mut st, id);
        }
        st
    }

    fn remove_session(&self, st: &mut State, id: u64) {
        let Some(s) = st.sessions.remove(&id) else {
            return;
        };
        for name in s.elections {
            self.change(st, &name, |e| e.queue.retain(|(c, _)| *c != id));
        }
    }

    /// Apply `f` to election `name` and publish a leader change if its head changed.
    fn change(&self, st: &mut State, name: &str, f: impl FnOnce(&mut MemElection)) {
        st.index += 1;
        let index = st.index;
        let e = st.elections.entry(name.to_string()).or_default();
        let old_head = e.queue.front().map(|c| c.0);
        f(e);
        let new_head = e.queue.front().map(|c| c.0);
        if new_head != old_head {
            if new_head.is_some() {
                e.token += 1;
            }
            // Nobody listening is fine: observers subscribe before they read.
            let _ = self.changes.send(LeaderEvent {
                election: name.to_string(),
                leader: e.leader(),
                index,
            });
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// The earliest time a session will expire.
    fn next_expiry(&self) -> Option<Instant> {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.sessions.values().map(|s| s.expires_at).min()
    }

    /// Sleep until the world may have changed: a change, or the next expiry.
    async fn changed(&self, rx: &mut watch::Receiver<u64>) {
        let far = Instant::now() + Duration::from_secs(3600);
        let at = self.next_expiry().unwrap_or(far);
        tokio::select! {
            // The sender lives in `self`: `changed` cannot fail while we borrow it.
            _ = rx.changed() => {}
            _ = tokio::time::sleep_until(at.into()) => {}
        }
    }

    pub fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
        if !(TTL_MIN..=TTL_MAX).contains(&ttl) {
            return Err(Error::InvalidArgument(format!(
                "ttl {ttl:?} outside [{TTL_MIN:?}, {TTL_MAX:?}]"
            )));
        }
        let mut st = self.lock();
        let id = st.next_session;
        st.next_session += 1;
        st.index += 1;
        st.sessions.insert(
            id,
            MemSession {
                ttl,
                expires_at: Instant::now() + ttl,
                elections: BTreeSet::new(),
            },
        );
        Ok((id, ttl))
    }

    pub fn keepalive(&self, session: u64) -> Result<Duration> {
        let mut st = self.lock();
        let s = st.sessions.get_mut(&session).ok_or(Error::SessionLost)?;
        s.expires_at = Instant::now() + s.ttl;
        Ok(s.ttl)
    }

    pub fn revoke(&self, session: u64) {
        let mut st = self.lock();
        self.remove_session(&mut st, session);
    }

    pub async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
        check_name(election)?;
        if value.len() > VALUE_BYTES_MAX {
            return Err(Error::InvalidArgument(format!(
                "value of {} bytes exceeds {VALUE_BYTES_MAX}",
                value.len()
            )));
        }
        let mut rx = self.version.subscribe();
        {
            let mut st = self.lock();
            let s = st.sessions.get_mut(&session).ok_or(Error::SessionLost)?;
            // A retried campaign keeps its place and its value, as on the cluster.
            if s.elections.insert(election.to_string()) {
                self.change(&mut st, election, |e| {
                    e.queue.push_back((session, value.to_vec()))
                });
            }
        }
        loop {
            {
                let st = self.lock();
                if !st.sessions.contains_key(&session) {
                    return Err(Error::SessionLost);
                }
                if let Some(e) = st.elections.get(election) {
                    if e.queue.front().map(|c| c.0) == Some(session) {
                        return Ok(e.token);
                    }
                }
            }
            self.changed(&mut rx).await;
            crate::note_waiter_wakeup();
        }
    }

    pub fn resign(&self, election: &str, session: u64) -> Result<()> {
        let mut st = self.lock();
        if !st.elections.contains_key(election) {
            return Err(Error::UnknownElection(election.to_string()));
        }
        if let Some(s) = st.sessions.get_mut(&session) {
            if s.elections.remove(election) {
                self.change(&mut st, election, |e| {
                    e.queue.retain(|(c, _)| *c != session)
                });
            }
        }
        Ok(())
    }

    pub fn transfer(&self, election: &str, from: u64, to: u64) -> Result<u64> {
        let mut st = self.lock();
        let e = st
            .elections
            .get(election)
            .ok_or_else(|| Error::UnknownElection(election.to_string()))?;
        if e.queue.front().map(|c| c.0) != Some(from) {
            return Err(Error::NotCandidate(format!(
                "session {from} does not lead {election:?}"
            )));
        }
        let Some(pos) = e.queue.iter().position(|c| c.0 == to) else {
            return Err(Error::NotCandidate(format!(
                "session {to} is not queued in {election:?}"
            )));
        };
        if pos == 0 {
            return Ok(e.token);
        }
        self.change(&mut st, election, |e| {
            if let Some(c) = e.queue.remove(pos) {
                e.queue.push_front(c);
            }
        });
        Ok(st.elections.get(election).map_or(0, |e| e.token))
    }

    pub fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        let st = self.lock();
        st.elections
            .get(election)
            .map(MemElection::leader)
            .ok_or_else(|| Error::UnknownElection(election.to_string()))
    }

    /// Forward every leader change of `election` (starting with the current leader) to `tx`
    /// until the receiver is dropped.
    pub fn observe(
        self: Arc<Self>,
        election: &str,
        tx: mpsc::Sender<Result<LeaderEvent>>,
    ) -> Result<()> {
        let mut changes = self.changes.subscribe();
        let first = {
            let st = self.lock();
            let e = st
                .elections
                .get(election)
                .ok_or_else(|| Error::UnknownElection(election.to_string()))?;
            LeaderEvent {
                election: election.to_string(),
                leader: e.leader(),
                index: st.index,
            }
        };
        let election = election.to_string();
        tokio::spawn(async move {
            let after = first.index;
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            let mut version = self.version.subscribe();
            loop {
                let ev = tokio::select! {
                    ev = changes.recv() => ev,
                    _ = tx.closed() => return,
                    // Expiries happen lazily: make them happen on time.
                    _ = self.changed(&mut version) => { drop(self.lock()); continue; }
                };
                match ev {
                    Ok(ev) if ev.election == election && ev.index > after => {
                        if tx.send(Ok(ev)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx
                            .send(Err(Error::Unavailable(format!(
                                "observer fell {n} changes behind; observe again"
                            ))))
                            .await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(())
    }
}

fn check_name(election: &str) -> Result<()> {
    if election.is_empty() || election.len() > ELECTION_NAME_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "election name must have 1 to {ELECTION_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}
