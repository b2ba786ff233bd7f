//! The `memory:` backend: the tenure cluster's replicated state machine
//! ([`tenure_core::sm::StateMachine`]) in one process, for tests.
//!
//! Sessions, elections, tokens and fenced keys are the cluster's own code: every operation is
//! a [`Command`] applied to the state machine at the next index, so queues, tokens that rise
//! on every change of leader and never reset, fenced-write refusals and the errors for
//! elections nobody campaigned in are exactly the cluster's. What a single process adds is
//! the part the cluster keeps outside its state machine, the lease clock: a session expires
//! `TTL` after its last keepalive was received (this process's monotonic clock), by an
//! `Expire` command applied lazily before every operation; every waiter also wakes at the
//! next expiry time, so no background task is needed (a world may be shared by several tokio
//! runtimes). One tick of the state machine is one millisecond.
//!
//! `memory:` is one process-wide world; `memory:NAME` a separate world per name, so that
//! tests running in parallel do not meet.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use tenure_core::sm::{Command, Response, SmLimits, StateMachine};
use tokio::sync::{broadcast, mpsc, watch};

use super::{Backend, Capabilities, Fence};
use crate::session::Session;
use crate::{Error, FencedValue, LeaderEvent, LeaderInfo, Result};

/// Shortest TTL a session may ask for, in ticks of a millisecond (the cluster's default).
const TTL_MIN_MS: u64 = 100;
/// Longest TTL a session may ask for, in ticks of a millisecond (the cluster's default).
const TTL_MAX_MS: u64 = 3_600_000;
/// How many leader changes an observer may fall behind before its stream fails.
const CHANGES_BUFFERED_MAX: usize = 1024;

/// The state machine, and the lease clock beside it.
#[derive(Debug)]
struct State {
    sm: StateMachine,
    /// The index of the last command applied; plays the role of the cluster's log index.
    index: u64,
    /// Per live session: its TTL and when it expires (last keepalive receive time + TTL).
    leases: BTreeMap<u64, (Duration, Instant)>,
}

/// One in-process world of sessions, elections and fenced keys.
#[derive(Debug)]
pub(crate) struct World {
    /// This world itself, for the tasks it spawns (observers, keepalives).
    me: Weak<World>,
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
    let limits = SmLimits {
        ttl_min_ticks: TTL_MIN_MS,
        ttl_max_ticks: TTL_MAX_MS,
        ..SmLimits::default()
    };
    let w = Arc::new_cyclic(|me| World {
        me: me.clone(),
        state: Mutex::new(State {
            sm: StateMachine::new(limits),
            index: 0,
            leases: BTreeMap::new(),
        }),
        changes: broadcast::channel(CHANGES_BUFFERED_MAX).0,
        version: watch::channel(0).0,
    });
    worlds.retain(|_, w| w.strong_count() > 0);
    worlds.insert(name.to_string(), Arc::downgrade(&w));
    w
}

fn leader_info(l: tenure_core::sm::LeaderInfo) -> LeaderInfo {
    LeaderInfo {
        session: l.session,
        value: l.value,
        token: l.token,
    }
}

/// A response the command at hand cannot produce: the state machine broke its own contract.
fn unexpected(what: &str, r: &Response) -> Error {
    Error::Backend(format!("{what}: unexpected state machine response {r:?}"))
}

impl World {
    /// A strong handle to this world: alive, since `&self` is borrowed from one.
    fn handle(&self) -> Arc<World> {
        self.me
            .upgrade()
            .expect("a world is borrowed only from a live Arc")
    }

    /// The state with every session due by now expired. The state machine changes only by
    /// whole `apply` calls, so a panic elsewhere cannot leave it half-changed: poison is
    /// ignored.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let due: Vec<u64> = st
            .leases
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(id, _)| *id)
            .collect();
        for session in due {
            st.leases.remove(&session);
            self.apply(&mut st, Command::Expire { session });
        }
        st
    }

    /// Apply `command` at the next index, publish the leader changes it caused, and wake
    /// the waiters.
    fn apply(&self, st: &mut State, command: Command) -> Response {
        st.index += 1;
        let index = st.index;
        let response = st.sm.apply(index, &command);
        for change in st.sm.take_leader_changes() {
            // Nobody listening is fine: observers subscribe before they read.
            let _ = self.changes.send(LeaderEvent {
                election: change.election,
                leader: change.leader.map(leader_info),
                index: change.index,
            });
        }
        self.version.send_modify(|v| *v += 1);
        response
    }

    /// The earliest time a session will expire.
    fn next_expiry(&self) -> Option<Instant> {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.leases.values().map(|(_, at)| *at).min()
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

    pub fn keepalive(&self, session: u64) -> Result<Duration> {
        let mut st = self.lock();
        let (ttl, at) = st.leases.get_mut(&session).ok_or(Error::SessionLost)?;
        *at = Instant::now() + *ttl;
        Ok(*ttl)
    }
}

#[async_trait::async_trait]
impl Backend for World {
    fn capabilities(&self) -> Capabilities {
        // The cluster's state machine in-process; every waiter re-checks on every change.
        Capabilities {
            scheme: "memory",
            transfer: true,
            wakes_only_next: false,
            fate_sharing: false,
        }
    }

    /// A task that renews every TTL/4; it holds the session only weakly, so it also ends by
    /// itself once the session is gone.
    fn spawn_keepalive(&self, session: Arc<Session>) -> tokio::task::JoinHandle<()> {
        let world = self.handle();
        let weak = Arc::downgrade(&session);
        let every = session.ttl / 4;
        drop(session);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(s) = weak.upgrade() else { return };
                let sent = Instant::now();
                match world.keepalive(s.id) {
                    Ok(ttl) => s.acked(sent, ttl),
                    Err(_) => {
                        s.end();
                        return;
                    }
                }
            }
        })
    }

    /// Queues synchronously, on the first poll of the campaign; whether it leads is known
    /// at once.
    async fn join(&self, election: &str, session: u64, value: &[u8]) -> Result<Option<u64>> {
        let campaign = self.campaign(election, session, value);
        tokio::pin!(campaign);
        let polled = std::future::poll_fn(|cx| Poll::Ready(campaign.as_mut().poll(cx))).await;
        match polled {
            Poll::Ready(r) => r.map(Some),
            Poll::Pending => Ok(None),
        }
    }

    async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
        // Whole ticks, rounded up: the session lives at least as long as asked.
        let ttl_ticks = u64::try_from(ttl.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        let mut st = self.lock();
        match self.apply(&mut st, Command::Grant { ttl_ticks }) {
            Response::Granted { session, ttl_ticks } => {
                let ttl = Duration::from_millis(ttl_ticks);
                st.leases.insert(session, (ttl, Instant::now() + ttl));
                Ok((session, ttl))
            }
            Response::Rejected(e) => Err(e.into()),
            r => Err(unexpected("grant", &r)),
        }
    }

    async fn revoke(&self, session: u64) -> Result<()> {
        let mut st = self.lock();
        if st.leases.remove(&session).is_none() {
            // Already gone (revoked, expired): the same end state.
            return Ok(());
        }
        match self.apply(&mut st, Command::Revoke { session }) {
            Response::Ended { .. } => Ok(()),
            Response::Rejected(e) => Err(e.into()),
            r => Err(unexpected("revoke", &r)),
        }
    }

    async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
        let mut rx = self.version.subscribe();
        {
            let mut st = self.lock();
            // A retried campaign keeps its place and its value, as on the cluster.
            let command = Command::Campaign {
                election: election.to_string(),
                session,
                value: value.to_vec(),
            };
            match self.apply(&mut st, command) {
                Response::Campaigned {
                    leader_token: Some(token),
                    ..
                } => return Ok(token),
                Response::Campaigned { .. } => {}
                Response::Rejected(e) => return Err(e.into()),
                r => return Err(unexpected("campaign", &r)),
            }
        }
        loop {
            self.changed(&mut rx).await;
            crate::note_waiter_wakeup();
            let st = self.lock();
            if st.sm.session(session).is_none() {
                return Err(Error::SessionLost);
            }
            if let Some(l) = st.sm.leader(election) {
                if l.session == session {
                    return Ok(l.token);
                }
            }
        }
    }

    async fn resign(&self, election: &str, session: u64) -> Result<()> {
        let mut st = self.lock();
        let command = Command::Resign {
            election: election.to_string(),
            session,
        };
        match self.apply(&mut st, command) {
            Response::Resigned => Ok(()),
            // Not (or no longer) queued, or the session is gone: nothing left to resign.
            Response::Rejected(
                tenure_core::sm::SmError::NotCandidate { .. }
                | tenure_core::sm::SmError::UnknownSession(_),
            ) => Ok(()),
            Response::Rejected(e) => Err(e.into()),
            r => Err(unexpected("resign", &r)),
        }
    }

    async fn transfer(&self, election: &str, from: u64, to: u64) -> Result<u64> {
        let mut st = self.lock();
        let command = Command::Transfer {
            election: election.to_string(),
            from,
            to,
        };
        match self.apply(&mut st, command) {
            Response::Transferred { token } => Ok(token),
            Response::Rejected(e) => Err(e.into()),
            r => Err(unexpected("transfer", &r)),
        }
    }

    async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        let st = self.lock();
        let query = Command::Leader {
            election: election.to_string(),
        };
        match st.sm.query(&query) {
            Some(Response::LeaderIs(l)) => Ok(l.map(leader_info)),
            Some(Response::Rejected(e)) => Err(e.into()),
            r => Err(Error::Backend(format!("leader: unexpected answer {r:?}"))),
        }
    }

    // The state machine is applied in-process, once: no retry needs the session's request
    // ids.
    async fn fenced_put(&self, key: &str, value: &[u8], fence: Fence<'_>) -> Result<u64> {
        let mut st = self.lock();
        let command = Command::FencedPut {
            key: key.to_string(),
            value: value.to_vec(),
            election: fence.election.to_string(),
            token: fence.token,
        };
        match self.apply(&mut st, command) {
            Response::Put => Ok(st.index),
            Response::Rejected(e) => Err(e.into()),
            r => Err(unexpected("fenced put", &r)),
        }
    }

    async fn fenced_delete(&self, key: &str, fence: Fence<'_>) -> Result<bool> {
        let mut st = self.lock();
        let command = Command::DeleteKey {
            key: key.to_string(),
            election: fence.election.to_string(),
            token: fence.token,
        };
        match self.apply(&mut st, command) {
            Response::Deleted { existed } => Ok(existed),
            Response::Rejected(e) => Err(e.into()),
            r => Err(unexpected("fenced delete", &r)),
        }
    }

    async fn delete_election(&self, election: &str) -> Result<bool> {
        let mut st = self.lock();
        let command = Command::DeleteElection {
            election: election.to_string(),
        };
        match self.apply(&mut st, command) {
            Response::Deleted { existed } => Ok(existed),
            Response::Rejected(e) => Err(e.into()),
            r => Err(unexpected("delete election", &r)),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<FencedValue>> {
        let st = self.lock();
        match st.sm.query(&Command::Get {
            key: key.to_string(),
        }) {
            Some(Response::Value(v)) => Ok(v.map(|v| FencedValue {
                value: v.value,
                election: v.election,
                token: v.token,
                index: v.index,
            })),
            Some(Response::Rejected(e)) => Err(e.into()),
            r => Err(Error::Backend(format!("get: unexpected answer {r:?}"))),
        }
    }

    /// Forward every leader change of `election` (starting with the current leader) to `tx`
    /// until the receiver is dropped.
    async fn observe(&self, election: &str, tx: mpsc::Sender<Result<LeaderEvent>>) -> Result<()> {
        let mut changes = self.changes.subscribe();
        let first = {
            let st = self.lock();
            let query = Command::Leader {
                election: election.to_string(),
            };
            let leader = match st.sm.query(&query) {
                Some(Response::LeaderIs(l)) => l.map(leader_info),
                Some(Response::Rejected(e)) => return Err(e.into()),
                r => return Err(Error::Backend(format!("observe: unexpected answer {r:?}"))),
            };
            LeaderEvent {
                election: election.to_string(),
                leader,
                index: st.index,
            }
        };
        let election = election.to_string();
        let this = self.handle();
        tokio::spawn(async move {
            let after = first.index;
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            let mut version = this.version.subscribe();
            loop {
                let ev = tokio::select! {
                    ev = changes.recv() => ev,
                    _ = tx.closed() => return,
                    // Expiries happen lazily: make them happen on time.
                    _ = this.changed(&mut version) => { drop(this.lock()); continue; }
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
