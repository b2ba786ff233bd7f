//! The driver: one thread owns the core's [`Node`] and its storage, and nothing else touches
//! them. Every input arrives on one bounded channel; after each batch of inputs the driver
//! handles the node's `Ready` in the order written on it: **persist (fsync) → advance → send →
//! answer clients**. Many proposals that arrive together share one fsync (group commit).
//!
//! The driver runs on its own OS thread, not a tokio task, because it blocks on fsync by
//! design: nothing may leave the node before its state is durable.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::message::Message;
use tenure_core::node::{Node, ProposeError, Role, Status};
use tenure_core::sm::{Command, LeaderChange, Response, SessionId, SmError};
use tenure_core::storage::Storage;
use tenure_core::types::{Index, NodeId, Term};
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
    /// The node stopped before the request was answered.
    #[error("the node is shutting down")]
    ShuttingDown,
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
        }
    }
}

/// A request from the API layer.
#[derive(Debug)]
pub enum ClientRequest {
    /// Propose a command; answered with its result once applied on this node.
    Propose {
        /// The command.
        command: Command,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<(Index, Response), ApiError>>,
    },
    /// Renew a session; answered with its TTL in ticks once acknowledged.
    KeepAlive {
        /// The session.
        session: SessionId,
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
            Ok(Err(_)) => Err(ApiError::ShuttingDown),
            Err(_) => Err(ApiError::Unavailable(
                "timed out waiting for the cluster".into(),
            )),
        }
    }

    /// Propose a command and wait for its result.
    pub async fn propose(
        &self,
        command: Command,
        timeout: Duration,
    ) -> Result<(Index, Response), ApiError> {
        self.call(|reply| ClientRequest::Propose { command, reply }, timeout)
            .await
    }
}

struct PendingProposal {
    term: Term,
    started: Instant,
    reply: oneshot::Sender<Result<(Index, Response), ApiError>>,
}

struct PendingKeepAlive {
    received: Instant,
    reply: oneshot::Sender<Result<u64, ApiError>>,
}

/// Keepalives unanswered after this long are dropped (the client has retried long since).
const KEEPALIVE_PENDING_MAX_AGE: Duration = Duration::from_secs(10);

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
    proposals: BTreeMap<Index, PendingProposal>,
    keepalives: BTreeMap<u64, PendingKeepAlive>,
    /// When each session's last keepalive reached this node (for the lease-age metric;
    /// forgotten when the session ends).
    last_keepalive: BTreeMap<SessionId, Instant>,
    next_tag: u64,
    last_role: Role,
    last_leader: Option<NodeId>,
    leaderless_since: Option<Instant>,
}

/// Build a driver and the handle to it.
pub fn new_driver<S: Storage, O: Outbox>(
    node: Node,
    storage: S,
    outbox: O,
    tick: Duration,
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
        last_role: status.role,
        last_leader: status.leader,
        leaderless_since: Some(Instant::now()),
        node,
        storage,
        outbox,
        tick,
        inputs: rx,
        leader_changes: changes.clone(),
        published: pub_tx,
        metrics: metrics.clone(),
        proposals: BTreeMap::new(),
        keepalives: BTreeMap::new(),
        last_keepalive: BTreeMap::new(),
        next_tag: 1,
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
        let start = Instant::now();
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
            self.expire_old_keepalives();
            self.publish();
            if stop {
                break;
            }
        }
        for (_, p) in std::mem::take(&mut self.proposals) {
            let _ = p.reply.send(Err(ApiError::ShuttingDown));
        }
        Ok(())
    }

    /// Ticks follow the monotonic clock, not the number of wake-ups: a driver that fell
    /// behind (or a process that was stopped) catches up on every tick it owes.
    fn catch_up_ticks(&mut self, start: Instant, ticks_done: &mut u64) {
        let due = (start.elapsed().as_micros() / self.tick.as_micros().max(1)) as u64;
        while *ticks_done < due {
            self.node.tick();
            *ticks_done += 1;
            self.observe_role();
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
                self.observe_role();
            }
            Input::Client(req) => self.handle_client(req),
        }
        false
    }

    fn handle_client(&mut self, req: ClientRequest) {
        match req {
            ClientRequest::Propose { command, reply } => match self.node.propose(command) {
                Ok(p) => {
                    self.proposals.insert(
                        p.index,
                        PendingProposal {
                            term: p.term,
                            started: Instant::now(),
                            reply,
                        },
                    );
                }
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            },
            ClientRequest::KeepAlive { session, reply } => {
                let now = Instant::now();
                if let Some(previous) = self.last_keepalive.insert(session, now) {
                    self.metrics.lease_age_at_renewal.observe(now - previous);
                }
                let tag = self.next_tag;
                self.next_tag += 1;
                match self.node.keepalive(session, tag) {
                    Ok(()) => {
                        self.keepalives.insert(
                            tag,
                            PendingKeepAlive {
                                received: Instant::now(),
                                reply,
                            },
                        );
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                    }
                }
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
            let ready = self.node.ready();
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
            for m in ready.messages {
                self.outbox.send(m);
            }
            for a in ready.applied {
                self.count_applied(&a.command, &a.response);
                if let Some(p) = self.proposals.remove(&a.index) {
                    if p.term == a.term {
                        self.metrics.commit_latency.observe(p.started.elapsed());
                        let _ = p.reply.send(Ok((a.index, a.response)));
                    } else {
                        // Another leader's entry took this index: ours was lost, and may be
                        // retried without risk of applying twice.
                        let _ = p.reply.send(Err(ApiError::NotLeader {
                            leader: self.node.status().leader,
                        }));
                    }
                }
            }
            for change in ready.leader_changes {
                self.metrics.election_leader_changes.fetch_add(1, Relaxed);
                let _ = self.leader_changes.send(change);
            }
            for ack in ready.keepalive_acks {
                if let Some(p) = self.keepalives.remove(&ack.tag) {
                    self.metrics.lease_renewal.observe(p.received.elapsed());
                    let _ = p.reply.send(Ok(ack.ttl_ticks));
                }
            }
            self.observe_role();
        }
        // Proposals below the applied index that were never answered belonged to entries
        // replaced by a snapshot; they were lost.
        let applied = self.node.status().applied;
        while let Some((&index, _)) = self.proposals.first_key_value() {
            if index > applied {
                break;
            }
            let p = self.proposals.remove(&index).expect("first key exists");
            let _ = p.reply.send(Err(ApiError::NotLeader {
                leader: self.node.status().leader,
            }));
        }
        Ok(())
    }

    fn count_applied(&mut self, command: &Command, response: &Response) {
        if let Response::Ended { session } = response {
            self.last_keepalive.remove(session);
        }
        match (command, response) {
            (Command::Expire { .. }, Response::Ended { .. }) => {
                self.metrics.session_expiries.fetch_add(1, Relaxed);
            }
            (
                Command::FencedPut { .. },
                Response::Rejected(SmError::StaleToken { .. } | SmError::TokenNotIssued { .. }),
            ) => {
                self.metrics.fenced_rejections.fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }

    /// Count role and leader transitions for the metrics.
    fn observe_role(&mut self) {
        let s = self.node.status();
        if s.role != self.last_role {
            match (self.last_role, s.role) {
                (Role::Leader, _) => {
                    self.metrics.step_downs.fetch_add(1, Relaxed);
                }
                (Role::PreCandidate, Role::Follower) => {
                    self.metrics.pre_votes_lost.fetch_add(1, Relaxed);
                }
                _ => {}
            }
            if s.role == Role::Candidate {
                self.metrics.elections_started.fetch_add(1, Relaxed);
            }
            self.last_role = s.role;
        }
        if s.leader != self.last_leader {
            match (self.last_leader, s.leader) {
                (_, None) => {
                    self.leaderless_since.get_or_insert_with(Instant::now);
                }
                (_, Some(_)) => {
                    self.metrics.leader_changes.fetch_add(1, Relaxed);
                    if let Some(since) = self.leaderless_since.take() {
                        self.metrics.failover.observe(since.elapsed());
                    }
                }
            }
            self.last_leader = s.leader;
        }
    }

    fn expire_old_keepalives(&mut self) {
        // Tags rise with arrival time, so the oldest are first: stop at the first young one
        // (a pass over every waiting keepalive after each batch would cost O(waiting)).
        while let Some(entry) = self.keepalives.first_entry() {
            if entry.get().received.elapsed() < KEEPALIVE_PENDING_MAX_AGE {
                break;
            }
            entry.remove();
        }
        if self.node.status().role != Role::Leader {
            // A node that stopped leading will never acknowledge what it holds.
            for (_, p) in std::mem::take(&mut self.keepalives) {
                let _ = p.reply.send(Err(ApiError::NotLeader {
                    leader: self.node.status().leader,
                }));
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
