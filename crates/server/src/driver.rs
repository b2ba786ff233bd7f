//! The driver: one thread owns the core's [`Node`] and its storage, and nothing else touches
//! them. Every input arrives on one bounded channel; after each batch of inputs the driver
//! handles the node's `Ready` in the order written on it: **persist (fsync) → advance → send →
//! answer clients**. Many proposals that arrive together share one fsync (group commit).
//!
//! The driver runs on its own OS thread, not a tokio task, because it blocks on fsync by
//! design: nothing may leave the node before its state is durable.
//!
//! What each client is answered is decided by [`tenure_driver::DriverCore`], the sans-IO
//! bookkeeping that the simulator runs too: this file only moves bytes, time and answers
//! between it, the disk, the transport and the oneshot channels of the API layer.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::message::Message;
use tenure_core::node::{Node, ProposeError, Role, Status};
use tenure_core::sm::{Command, LeaderChange, RequestId, Response, SessionId, SmError};
use tenure_core::storage::Storage;
use tenure_core::types::{Index, NodeId};
use tenure_driver::{
    DriverBugs, DriverCore, Event, Failure, KeepaliveOutcome, Micros, Outcome, Unknown,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::metrics::Metrics;

/// Most inputs handled before the driver stops to persist and send; bounds the latency a
/// burst can add to the messages already waiting.
pub const INPUT_BATCH_MAX: usize = 1_024;
/// Capacity of the driver's input channel.
pub const INPUT_QUEUE_MAX: usize = 16_384;
/// Capacity of the broadcast channel of election leader changes.
pub const LEADER_CHANGES_QUEUE_MAX: usize = 65_536;

/// Why a client request failed. The API layer turns these into gRPC statuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// This node does not lead; retry at the leader if known.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader this node knows of.
        leader: Option<NodeId>,
    },
    /// Temporarily unable (transfer in progress, overloaded, no leader); retry.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The request breaks a rule; do not retry as is.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The state machine rejected the command; nothing changed.
    #[error("{0}")]
    Rejected(SmError),
    /// The session does not exist (or its expiry is under way).
    #[error("session {0} does not exist")]
    UnknownSession(SessionId),
    /// The node stopped before the request reached it; nothing was proposed.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The command may or may not have taken effect (the node stopped, a snapshot hid its
    /// entry, or the wait timed out). Retry with the same request id to learn which: the
    /// retry returns the original result if it was applied, and applies it otherwise.
    #[error("outcome unknown: {0}")]
    Indeterminate(String),
}

impl From<Failure> for ApiError {
    fn from(f: Failure) -> ApiError {
        match f {
            Failure::Refused(e) => e.into(),
            Failure::Superseded { leader } => ApiError::NotLeader { leader },
        }
    }
}

impl From<Unknown> for ApiError {
    fn from(u: Unknown) -> ApiError {
        ApiError::Indeterminate(u.to_string())
    }
}

impl From<ProposeError> for ApiError {
    fn from(e: ProposeError) -> ApiError {
        match e {
            ProposeError::NotLeader { leader_hint } => ApiError::NotLeader {
                leader: leader_hint,
            },
            ProposeError::Transferring => {
                ApiError::Unavailable("leadership transfer in progress".into())
            }
            ProposeError::TooManyUncommitted => {
                ApiError::Unavailable("too many uncommitted entries".into())
            }
            ProposeError::MembershipChangePending => {
                ApiError::Unavailable("a membership change is in progress".into())
            }
            ProposeError::InvalidMembership(m) => ApiError::Invalid(m),
            ProposeError::UnknownSession(s) => ApiError::UnknownSession(s),
            ProposeError::Invalid(e) => ApiError::Rejected(e),
            ProposeError::ClientCommandNotAllowed => {
                ApiError::Invalid("command reserved to the leader".into())
            }
            ProposeError::NotARead => ApiError::Invalid("not a read".into()),
            ProposeError::LeadershipUnconfirmed => ApiError::Unavailable(
                "the leader could not confirm its leadership with a quorum".into(),
            ),
        }
    }
}

/// A request from the API layer.
#[derive(Debug)]
pub enum ClientRequest {
    /// Propose a command; answered with its result once applied on this node.
    Propose {
        /// The client's request id, so that a retry is never applied twice.
        request: Option<RequestId>,
        /// The command.
        command: Command,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<(Index, Response), ApiError>>,
    },
    /// Renew a session; answered with its TTL in ticks once acknowledged.
    KeepAlive {
        /// The session.
        session: SessionId,
        /// The hash of the secret the client presented, if any.
        secret_hash: Option<tenure_core::sm::SecretHash>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<u64, ApiError>>,
    },
    /// Transfer Raft leadership.
    TransferLeader {
        /// Target node.
        to: NodeId,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    /// Change voters and learners.
    ChangeMembership {
        /// New voters.
        voters: BTreeSet<NodeId>,
        /// New learners.
        learners: BTreeSet<NodeId>,
        /// Where the answer goes (once the change is appended).
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
}

/// One input to the driver.
#[derive(Debug)]
pub enum Input {
    /// Time passed; tick as many times as are due.
    Wake,
    /// A message from a peer.
    Peer(Message),
    /// A client request.
    Client(ClientRequest),
    /// Stop after handling what is queued.
    Shutdown,
}

/// Where the driver sends peer messages (the TCP transport, or a test double).
pub trait Outbox: Send + 'static {
    /// Send without blocking; a message that cannot be sent may be dropped (Raft retries).
    fn send(&self, message: Message);
}

/// What the driver publishes after every batch, for the API and HTTP layers.
#[derive(Clone, Debug)]
pub struct Published {
    /// The node's status.
    pub status: Status,
    /// Live sessions.
    pub sessions: usize,
}

/// Handles for talking to a running driver.
#[derive(Clone)]
pub struct DriverHandle {
    /// Inputs.
    pub inputs: mpsc::Sender<Input>,
    /// Election leader changes as they are applied.
    pub leader_changes: broadcast::Sender<LeaderChange>,
    /// Latest published status.
    pub published: watch::Receiver<Published>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

impl DriverHandle {
    /// Send a request and wait for the answer, at most `timeout`.
    pub async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, ApiError>>) -> ClientRequest,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.inputs
            .try_send(Input::Client(make(tx)))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => {
                    ApiError::Unavailable("server overloaded".into())
                }
                mpsc::error::TrySendError::Closed(_) => ApiError::ShuttingDown,
            })?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer,
            // The driver took the request and went away without answering.
            Ok(Err(_)) => Err(Unknown::Stopped.into()),
            Err(_) => Err(ApiError::Unavailable(CALL_TIMED_OUT.into())),
        }
    }

    /// Propose a command and wait for its result. Once the request has reached the driver,
    /// a timeout or a driver that goes away is indeterminate, never a definite failure: the
    /// entry may be in the log and commit later.
    pub async fn propose(
        &self,
        request: Option<RequestId>,
        command: Command,
        timeout: Duration,
    ) -> Result<(Index, Response), ApiError> {
        let answer = self
            .call(
                |reply| ClientRequest::Propose {
                    request,
                    command,
                    reply,
                },
                timeout,
            )
            .await;
        match answer {
            Err(ApiError::Unavailable(why)) if why == CALL_TIMED_OUT => {
                Err(Unknown::TimedOut.into())
            }
            Err(ApiError::Indeterminate(why)) => Err(ApiError::Indeterminate(why)),
            other => other,
        }
    }
}

/// What [`DriverHandle::call`] says when its wait ran out.
const CALL_TIMED_OUT: &str = "timed out waiting for the cluster";

type ProposalReply = oneshot::Sender<Result<(Index, Response), ApiError>>;
type KeepAliveReply = oneshot::Sender<Result<u64, ApiError>>;

/// The driver's state; runs on its own thread via [`Driver::run`].
pub struct Driver<S: Storage, O: Outbox> {
    node: Node,
    storage: S,
    outbox: O,
    tick: Duration,
    inputs: mpsc::Receiver<Input>,
    leader_changes: broadcast::Sender<LeaderChange>,
    published: watch::Sender<Published>,
    metrics: Arc<Metrics>,
    /// Who waits for what, and what they are answered: shared with the simulator.
    core: DriverCore<ProposalReply, KeepAliveReply>,
    /// Origin of the driver core's microsecond clock.
    start: Instant,
}

/// Build a driver and the handle to it.
pub fn new_driver<S: Storage, O: Outbox>(
    node: Node,
    storage: S,
    outbox: O,
    tick: Duration,
    bugs: DriverBugs,
) -> (Driver<S, O>, DriverHandle) {
    let (tx, rx) = mpsc::channel(INPUT_QUEUE_MAX);
    let (changes, _) = broadcast::channel(LEADER_CHANGES_QUEUE_MAX);
    let status = node.status();
    let (pub_tx, pub_rx) = watch::channel(Published {
        status: status.clone(),
        sessions: 0,
    });
    let metrics = Arc::new(Metrics::default());
    let driver = Driver {
        core: DriverCore::new(&status, 0, bugs),
        start: Instant::now(),
        node,
        storage,
        outbox,
        tick,
        inputs: rx,
        leader_changes: changes.clone(),
        published: pub_tx,
        metrics: metrics.clone(),
    };
    let handle = DriverHandle {
        inputs: tx,
        leader_changes: changes,
        published: pub_rx,
        metrics,
    };
    (driver, handle)
}

/// A storage failure: the node stops, because continuing could break durability promises.
#[derive(Debug, thiserror::Error)]
#[error("storage failed, node stopped: {0}")]
pub struct StorageFailed(pub String);

impl<S: Storage, O: Outbox> Driver<S, O> {
    /// Run until `Input::Shutdown` or until every input sender is gone.
    pub fn run(mut self) -> Result<(), StorageFailed> {
        let start = self.start;
        let mut ticks_done: u64 = 0;
        // Anything the node produced while starting (replayed entries) goes out first.
        self.process_ready()?;
        loop {
            let Some(first) = self.inputs.blocking_recv() else {
                break;
            };
            // Time comes first (see `tenure_core::node`): a process that was stopped wakes
            // up with queued keepalives and messages, and must tick for the time it lost
            // before it judges any of them by its lease.
            self.catch_up_ticks(start, &mut ticks_done);
            let mut stop = self.handle(first);
            let mut handled = 1;
            while handled < INPUT_BATCH_MAX && !stop {
                match self.inputs.try_recv() {
                    Ok(input) => {
                        self.catch_up_ticks(start, &mut ticks_done);
                        stop = self.handle(input);
                        handled += 1;
                    }
                    Err(_) => break,
                }
            }
            self.catch_up_ticks(start, &mut ticks_done);
            self.process_ready()?;
            let now = self.now_us();
            self.core.expire_keepalives(now);
            self.deliver();
            self.publish();
            if stop {
                break;
            }
        }
        // Whatever still waits may yet be committed by the others.
        self.core.stop();
        self.deliver();
        Ok(())
    }

    fn now_us(&self) -> Micros {
        self.start.elapsed().as_micros() as Micros
    }

    /// Ticks follow the monotonic clock, not the number of wake-ups: a driver that fell
    /// behind (or a process that was stopped) catches up on every tick it owes.
    fn catch_up_ticks(&mut self, start: Instant, ticks_done: &mut u64) {
        let due = (start.elapsed().as_micros() / self.tick.as_micros().max(1)) as u64;
        while *ticks_done < due {
            self.node.tick();
            *ticks_done += 1;
            let now = self.now_us();
            self.core.observe(&self.node, now);
        }
    }

    /// Returns true on shutdown.
    fn handle(&mut self, input: Input) -> bool {
        match input {
            Input::Wake => {}
            Input::Shutdown => return true,
            Input::Peer(m) => {
                if let Err(e) = self.node.step(m) {
                    self.metrics.bad_peer_messages.fetch_add(1, Relaxed);
                    tracing::warn!("refused peer message: {e}");
                }
                let now = self.now_us();
                self.core.observe(&self.node, now);
            }
            Input::Client(req) => self.handle_client(req),
        }
        false
    }

    fn handle_client(&mut self, req: ClientRequest) {
        let now = self.now_us();
        match req {
            ClientRequest::Propose {
                request,
                command,
                reply,
            } => {
                self.core
                    .propose(&mut self.node, now, request, command, reply);
            }
            ClientRequest::KeepAlive {
                session,
                secret_hash,
                reply,
            } => {
                self.core
                    .keepalive_as(&mut self.node, now, session, secret_hash, reply);
            }
            ClientRequest::TransferLeader { to, reply } => {
                let _ = reply.send(self.node.transfer_leadership(to).map_err(Into::into));
            }
            ClientRequest::ChangeMembership {
                voters,
                learners,
                reply,
            } => {
                let r = self
                    .node
                    .change_membership(voters, learners)
                    .map(|_| ())
                    .map_err(Into::into);
                let _ = reply.send(r);
            }
        }
    }

    fn process_ready(&mut self) -> Result<(), StorageFailed> {
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            if ready.hard_state.is_some() || ready.snapshot.is_some() || !ready.entries.is_empty() {
                let started = Instant::now();
                self.storage
                    .persist(
                        ready.hard_state.as_ref(),
                        ready.snapshot.as_ref(),
                        &ready.entries,
                    )
                    .map_err(|e| StorageFailed(e.to_string()))?;
                self.metrics.fsync_latency.observe(started.elapsed());
            }
            self.node.advance();
            for m in std::mem::take(&mut ready.messages) {
                self.outbox.send(m);
            }
            let now = self.now_us();
            self.core.on_ready(&self.node, now, &ready);
            for change in ready.leader_changes {
                let _ = self.leader_changes.send(change);
            }
        }
        self.deliver();
        Ok(())
    }

    /// Hands the driver core's answers to the waiting API calls and its events to the
    /// metrics.
    fn deliver(&mut self) {
        let out = self.core.drain();
        for a in out.answers {
            let answer = match a.outcome {
                Outcome::Applied { index, response } => Ok((index, response)),
                Outcome::Failed(f) => Err(f.into()),
                Outcome::Indeterminate(u) => Err(u.into()),
            };
            // A caller that gave up no longer listens; nothing to do then.
            let _ = a.reply.send(answer);
        }
        for k in out.keepalives {
            let answer = match k.outcome {
                KeepaliveOutcome::Acked { ttl_ticks } => Ok(ttl_ticks),
                KeepaliveOutcome::Refused(e) => Err(e.into()),
            };
            let _ = k.reply.send(answer);
        }
        let m = &self.metrics;
        let us = |n: Micros| Duration::from_micros(n);
        for event in out.events {
            match event {
                Event::Committed { latency_us } => m.commit_latency.observe(us(latency_us)),
                Event::Renewed { latency_us } => m.lease_renewal.observe(us(latency_us)),
                Event::LeaseAgeAtRenewal { age_us } => m.lease_age_at_renewal.observe(us(age_us)),
                Event::StepDown => {
                    m.step_downs.fetch_add(1, Relaxed);
                }
                Event::PreVoteLost => {
                    m.pre_votes_lost.fetch_add(1, Relaxed);
                }
                Event::ElectionStarted => {
                    m.elections_started.fetch_add(1, Relaxed);
                }
                Event::LeaderKnown { leaderless_us, .. } => {
                    m.leader_changes.fetch_add(1, Relaxed);
                    if let Some(gap) = leaderless_us {
                        m.failover.observe(us(gap));
                    }
                }
                Event::SessionExpired => {
                    m.session_expiries.fetch_add(1, Relaxed);
                }
                Event::FencedRejection => {
                    m.fenced_rejections.fetch_add(1, Relaxed);
                }
                Event::ElectionLeaderChanged => {
                    m.election_leader_changes.fetch_add(1, Relaxed);
                }
            }
        }
    }

    fn publish(&mut self) {
        let status = self.node.status();
        let m = &self.metrics;
        m.term.store(status.term, Relaxed);
        m.leader_id.store(status.leader.unwrap_or(0), Relaxed);
        m.is_leader
            .store(u64::from(status.role == Role::Leader), Relaxed);
        m.commit_index.store(status.commit, Relaxed);
        m.applied_index.store(status.applied, Relaxed);
        let sessions = self.node.state_machine().session_count();
        m.sessions.store(sessions as u64, Relaxed);
        let changed = {
            let current = self.published.borrow();
            current.status != status || current.sessions != sessions
        };
        if changed {
            let _ = self.published.send(Published { status, sessions });
        }
    }

    /// Read-only access for the API layer's snapshot reads is through the log; this is for
    /// tests.
    pub fn node(&self) -> &Node {
        &self.node
    }
}
