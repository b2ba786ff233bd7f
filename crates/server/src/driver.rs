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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::event::NodeEvent;
use tenure_core::message::{Body, Message};
use tenure_core::node::{Node, PeerProgress, ProposeError, Role, SnapshotImage, Status};
use tenure_core::sm::{Command, LeaderChange, RequestId, Response, SessionId, SmError};
use tenure_core::storage::{BackgroundSnapshots, SnapshotWriter};
use tenure_core::types::{Index, Membership, NodeId, Snapshot, Term};
use tenure_driver::{
    DriverBugs, Event, Failure, KeepaliveOutcome, Micros, Outcome, Pipeline, StepDownReason,
    Unknown,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::metrics::Metrics;

/// Most inputs handled before the driver stops to persist and send; bounds the latency a
/// burst can add to the messages already waiting. A batch also ends once it has taken a
/// heartbeat interval, so that a node short of CPU still sends its heartbeats and
/// acknowledgements in time (see `Driver::run`).
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
        /// The authenticated principal that sent it (`None` without authentication): a
        /// session owned by another principal is not renewed.
        principal: Option<String>,
        /// Fate-sharing: bind the session to the KeepAlive stream the request came on.
        bind: Option<tenure_core::node::Bind>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<u64, ApiError>>,
    },
    /// A KeepAlive stream that bound sessions ended (no answer): see
    /// [`tenure_core::node::Node::stream_ended`].
    StreamEnded {
        /// The stream.
        stream: u64,
        /// Who ended it, as the API layer can tell.
        end: tenure_core::node::StreamEnd,
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
        /// Where the answer goes: where the change was appended (see
        /// [`DriverHandle::change_membership`], which waits for it to take effect).
        reply: oneshot::Sender<Result<tenure_core::node::Proposed, ApiError>>,
    },
    /// Read one page of elections, by name, from the applied state (no log write); see
    /// [`DriverHandle::list_elections`].
    ListElections {
        /// Start strictly after this name ("" = from the first; it need not exist).
        after: String,
        /// Page size asked for (0: the default; capped, see [`tenure_core::sm::list`]).
        limit: usize,
        /// Where the page goes.
        reply: oneshot::Sender<Result<ElectionListing, ApiError>>,
    },
    /// Read one page of fenced keys under a prefix, by name, from the applied state (no
    /// log write); see [`DriverHandle::list_keys`].
    ListKeys {
        /// Only keys that start with this.
        prefix: String,
        /// Start strictly after this key (one below `prefix`, such as "", starts at the
        /// first).
        after: String,
        /// Page size asked for (0: the default; capped, see [`tenure_core::sm::list`]).
        limit: usize,
        /// Where the page goes.
        reply: oneshot::Sender<Result<KeyListing, ApiError>>,
    },
    /// Freeze the applied state (O(1)) for a backup; see [`DriverHandle::applied_image`].
    AppliedImage {
        /// Where the image goes.
        reply: oneshot::Sender<Result<tenure_core::node::SnapshotImage, ApiError>>,
    },
    /// Read one page of sessions, by id, from the applied state (no log write); see
    /// [`DriverHandle::list_sessions`].
    ListSessions {
        /// Start strictly after this id (0 = from the first; it need not exist).
        after: SessionId,
        /// Page size asked for (0: the default; capped, see [`tenure_core::sm::list`]).
        limit: usize,
        /// Where the page goes.
        reply: oneshot::Sender<Result<SessionListing, ApiError>>,
    },
}

/// One page read on the driver thread, as of `applied_index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing<T> {
    /// The page.
    pub page: tenure_core::sm::list::Page<T>,
    /// The applied index the page was read at.
    pub applied_index: Index,
}

/// A page of elections: each with the log index where its current leader (or, with none,
/// its last change) took effect; 0 when that change is older than what this node has
/// replayed since it started (it restored a snapshot taken after it).
pub type ElectionListing = Listing<(tenure_core::sm::list::ElectionSummary, Index)>;

/// A page of sessions: each with how long this node will keep it without a renewal, in
/// milliseconds: its own lease clock's lower bound (`Node::session_deadline_tick`).
pub type SessionListing = Listing<(tenure_core::sm::list::SessionSummary, u64)>;

/// A page of fenced keys (name and value), as applied.
pub type KeyListing = Listing<(String, tenure_core::sm::FencedValue)>;

/// One input to the driver.
#[derive(Debug)]
pub enum Input {
    /// Time passed; tick as many times as are due.
    Wake,
    /// A message from a peer.
    Peer(Message),
    /// The transport's connection to a peer closed (fast election).
    PeerClosed(NodeId),
    /// The transport's dial to a peer was refused: nothing listens on its peer port. With
    /// the node's follow epoch as of the dial's start ([`Outbox::set_follow_epoch`]).
    PeerRefused(NodeId, u64),
    /// A client request, and when the API task handed it over (the queue's stage).
    Client(ClientRequest, Instant),
    /// Stop after handling what is queued.
    Shutdown,
    /// Panic on the driver thread (`POST /debug/driver-panic`, with fault injection only, or
    /// `TENURE_INJECT_BUG=driver-dies`): how tests show that a node whose driver dies exits
    /// instead of lingering, and that the nemesis sees it.
    InjectPanic,
}

/// Where the driver sends peer messages (the TCP transport, or a test double).
pub trait Outbox: Send + 'static {
    /// Send without blocking; a message that cannot be sent may be dropped (Raft retries).
    fn send(&self, message: Message);

    /// The node's follow epoch after a batch, for the transport to stamp its dials with
    /// (fast election); nothing by default.
    fn set_follow_epoch(&self, _epoch: u64) {}
}

/// Where the driver publishes what happens on this node, next to each log line: the
/// dashboard's journal, which the driver knows only as this. Called on the driver thread, so
/// an implementation never blocks.
pub trait EventSink: Send + Sync + 'static {
    /// `event` happened on node `node`.
    fn note(&self, node: NodeId, event: &Event);
}

/// What the driver publishes after every batch, for the API and HTTP layers.
#[derive(Clone, Debug)]
pub struct Published {
    /// The node's status.
    pub status: Status,
    /// Live sessions.
    pub sessions: usize,
    /// While this node leads: every other member's match index and the tick it was last
    /// heard from (`status.now_tick` is the same clock). Empty otherwise.
    pub progress: BTreeMap<NodeId, PeerProgress>,
    /// The replicated member directory (addresses of members added at run time), as
    /// applied here. Shared: it changes only when a `SetMember` entry is applied.
    pub members: Arc<BTreeMap<NodeId, tenure_core::sm::MemberAddresses>>,
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
    /// True while the driver thread runs: cleared when it returns or panics, so that
    /// `/health` fails at once while the process exits (a node without its driver answers
    /// nothing useful, and its published status is frozen).
    pub running: Arc<std::sync::atomic::AtomicBool>,
}

impl DriverHandle {
    /// Changes the voters and learners (joint consensus when voters change) and answers once
    /// the change is in effect: this node has seen the entry committed and holds the asked-for
    /// membership, no longer joint. A refusal before the log is definite (nothing changed);
    /// after `timeout` the answer is `Indeterminate` (the change may still complete, or have
    /// been superseded by a new leader).
    pub async fn change_membership(
        &self,
        voters: BTreeSet<NodeId>,
        learners: BTreeSet<NodeId>,
        timeout: Duration,
    ) -> Result<Membership, ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let (want_voters, want_learners) = (voters.clone(), learners.clone());
        let mut published = self.published.clone();
        let proposed = self
            .call(
                |reply| ClientRequest::ChangeMembership {
                    voters,
                    learners,
                    reply,
                },
                timeout,
            )
            .await?;
        let in_effect = |p: &Published| {
            let m = &p.status.membership;
            p.status.commit >= proposed.index
                && !m.is_joint()
                && m.voters == want_voters
                && m.learners == want_learners
        };
        let waited = tokio::time::timeout_at(deadline, async {
            published
                .wait_for(in_effect)
                .await
                .map(|p| p.status.membership.clone())
        })
        .await;
        match waited {
            Ok(Ok(membership)) => Ok(membership),
            Ok(Err(_)) => Err(ApiError::Indeterminate(
                "the node stopped before the membership change took effect".into(),
            )),
            Err(_) => Err(ApiError::Indeterminate(format!(
                "the membership change (log index {}) did not take effect within {timeout:?}; \
                 it may still, or a new leader may have superseded it: check the membership",
                proposed.index
            ))),
        }
    }

    /// Send a request and wait for the answer, at most `timeout`.
    pub async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, ApiError>>) -> ClientRequest,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.inputs
            .try_send(Input::Client(make(tx), Instant::now()))
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

    /// One page of elections as this node has applied them (no log write, so a follower
    /// may lag; any node answers), waiting at most `timeout`. For the list RPCs, the
    /// dashboard and election retention.
    pub async fn list_elections(
        &self,
        after: String,
        limit: usize,
        timeout: Duration,
    ) -> Result<ElectionListing, ApiError> {
        self.call(
            |reply| ClientRequest::ListElections {
                after,
                limit,
                reply,
            },
            timeout,
        )
        .await
    }

    /// One page of the fenced keys under `prefix` as this node has applied them; as
    /// [`DriverHandle::list_elections`]. For the dashboard's scheduled jobs.
    pub async fn list_keys(
        &self,
        prefix: String,
        after: String,
        limit: usize,
        timeout: Duration,
    ) -> Result<KeyListing, ApiError> {
        self.call(
            |reply| ClientRequest::ListKeys {
                prefix,
                after,
                limit,
                reply,
            },
            timeout,
        )
        .await
    }

    /// The applied state, frozen now with the term and membership of its index (what
    /// `tenure backup` streams, encoded off the driver's thread by the caller).
    pub async fn applied_image(
        &self,
        timeout: Duration,
    ) -> Result<tenure_core::node::SnapshotImage, ApiError> {
        self.call(|reply| ClientRequest::AppliedImage { reply }, timeout)
            .await
    }

    /// One page of sessions as this node has applied them; as
    /// [`DriverHandle::list_elections`].
    pub async fn list_sessions(
        &self,
        after: SessionId,
        limit: usize,
        timeout: Duration,
    ) -> Result<SessionListing, ApiError> {
        self.call(
            |reply| ClientRequest::ListSessions {
                after,
                limit,
                reply,
            },
            timeout,
        )
        .await
    }

    /// Hands Raft leadership to node `to` (0: the voter that is most caught up), waiting at
    /// most `timeout` for the driver to start the transfer.
    pub async fn transfer_leadership(&self, to: NodeId, timeout: Duration) -> Result<(), ApiError> {
        self.call(|reply| ClientRequest::TransferLeader { to, reply }, timeout)
            .await
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
        let handed = Instant::now();
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
        if answer.is_ok() {
            self.metrics.stages.write_total.observe(handed.elapsed());
        }
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

/// A background snapshot, encoded and written (or not) on its own thread: `W` is what the
/// storage records, `E` why it could not be written.
struct SnapshotDone<W, E> {
    snapshot: Snapshot,
    written: Result<W, E>,
    encode: Duration,
    write: Duration,
}

/// What storage `S`'s snapshot thread reports.
type SnapshotDoneOf<S> = SnapshotDone<
    <S as BackgroundSnapshots>::Written,
    <<S as BackgroundSnapshots>::Writer as SnapshotWriter>::Error,
>;

/// The driver's state; runs on its own thread via [`Driver::run`].
pub struct Driver<S: BackgroundSnapshots, O: Outbox> {
    /// The node and its driver core (who waits for what, and what they are answered), and
    /// the order each Ready goes through: shared with the simulator.
    pipeline: Pipeline<ProposalReply, KeepAliveReply>,
    storage: S,
    outbox: O,
    tick: Duration,
    inputs: mpsc::Receiver<Input>,
    leader_changes: broadcast::Sender<LeaderChange>,
    published: watch::Sender<Published>,
    metrics: Arc<Metrics>,
    /// Origin of the driver core's microsecond clock.
    start: Instant,
    /// This node's id, for the log.
    id: NodeId,
    /// The last snapshot index logged as sent to each peer: the leader resends a snapshot
    /// once per election timeout until the peer acknowledges it, and only the first send
    /// of each is worth an info line.
    snapshots_sent_logged: BTreeMap<NodeId, Index>,
    /// When a leader's writes reached each stage, for the stage histograms.
    times: WriteTimes,
    /// A snapshot from a leader that the node accepted and has not yet made durable:
    /// `(index, term, from)`. Logged as installed once persisted.
    snapshot_installing: Option<(Index, Term, NodeId)>,
    /// Pre-vote rounds lost since a leader was last known or an election started: only
    /// the first of a streak is logged at info.
    pre_votes_lost_in_a_row: u64,
    /// The log index of each election's latest leader change this node applied since it
    /// started, for listings (`since`).
    election_since: BTreeMap<String, Index>,
    /// Where every event goes next to its log line (the dashboard's journal).
    sink: Arc<dyn EventSink>,
    /// The thread encoding and writing this node's own snapshot, if one is under way (at
    /// most one: the node hands out no other until it is reported taken).
    snapshot_thread: Option<std::thread::JoinHandle<()>>,
    /// Where that thread reports, and a way to wake the driver when it does.
    snapshot_done: (
        std::sync::mpsc::Sender<SnapshotDoneOf<S>>,
        std::sync::mpsc::Receiver<SnapshotDoneOf<S>>,
    ),
    wake: mpsc::WeakSender<Input>,
}

/// When a leader's writes reached each stage of the driver, for
/// `tenure_stage_seconds{stage="propose"|"replicate"|"apply"}`. Only timing: nothing here
/// decides anything. A node that does not lead forgets it all.
#[derive(Default)]
struct WriteTimes {
    /// The first proposal the leader took into its log since its last write of client
    /// proposals started.
    proposed: Option<Instant>,
    /// The leader's last entry of each write of client proposals not yet committed, and
    /// when that write started.
    replicating: std::collections::VecDeque<(Index, Instant)>,
    /// When the driver last saw some of those entries committed; the answers handed out
    /// next are timed from it.
    committed: Option<Instant>,
}

/// Build a driver and the handle to it; its events go to `sink` as well as to the log.
pub fn new_driver<S: BackgroundSnapshots, O: Outbox>(
    node: Node,
    storage: S,
    outbox: O,
    tick: Duration,
    bugs: DriverBugs,
    sink: Arc<dyn EventSink>,
) -> (Driver<S, O>, DriverHandle) {
    let (tx, rx) = mpsc::channel(INPUT_QUEUE_MAX);
    let (changes, _) = broadcast::channel(LEADER_CHANGES_QUEUE_MAX);
    let status = node.status();
    let (pub_tx, pub_rx) = watch::channel(Published {
        status: status.clone(),
        sessions: 0,
        progress: BTreeMap::new(),
        members: Arc::new(node.state_machine().members().clone()),
    });
    let metrics = Arc::new(Metrics::default());
    let driver = Driver {
        sink,
        start: Instant::now(),
        id: status.id,
        snapshots_sent_logged: BTreeMap::new(),
        times: WriteTimes::default(),
        snapshot_installing: None,
        pre_votes_lost_in_a_row: 0,
        election_since: BTreeMap::new(),
        pipeline: Pipeline::new(node, 0, true, bugs),
        storage,
        outbox,
        tick,
        inputs: rx,
        snapshot_thread: None,
        snapshot_done: std::sync::mpsc::channel(),
        wake: tx.downgrade(),
        leader_changes: changes.clone(),
        published: pub_tx,
        metrics: metrics.clone(),
    };
    let handle = DriverHandle {
        inputs: tx,
        leader_changes: changes,
        published: pub_rx,
        metrics,
        running: Arc::new(std::sync::atomic::AtomicBool::new(true)),
    };
    (driver, handle)
}

/// Lowers the calling thread's CPU priority (nice 10): a snapshot thread gives way to the
/// driver threads, so that on a busy machine heartbeats and votes come first.
fn lower_thread_priority() {
    // SAFETY: setpriority reads only its arguments. On Linux a nice value belongs to a
    // thread, and `who = 0` names the calling one; a failure only leaves the priority as it was.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
}

/// What a panic carried, as text.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// A storage failure: the node stops, because continuing could break durability promises.
#[derive(Debug, thiserror::Error)]
#[error("storage failed, node stopped: {0}")]
pub struct StorageFailed(pub String);

impl<S: BackgroundSnapshots, O: Outbox> Driver<S, O> {
    /// Run until `Input::Shutdown` or until every input sender is gone.
    pub fn run(mut self) -> Result<(), StorageFailed> {
        let start = self.start;
        // Anything the node produced while starting (replayed entries) goes out first.
        self.process_ready()?;
        // A pass of the loop longer than this is worth a warning: followers time out after
        // one election timeout without a heartbeat.
        let stall =
            self.tick * (self.pipeline.node().config().election_timeout_ticks / 2).max(1) as u32;
        // Handling a batch of inputs holds back every message they produce, heartbeats
        // included: a batch ends after a heartbeat interval however many inputs wait.
        let batch_for = self.tick * self.pipeline.node().config().heartbeat_ticks.max(1) as u32;
        loop {
            let Some(first) = self.inputs.blocking_recv() else {
                break;
            };
            let woke = Instant::now();
            // Time comes first (see `tenure_core::node`): a process that was stopped wakes
            // up with queued keepalives and messages, and must tick for the time it lost
            // before it judges any of them by its lease.
            self.catch_up_ticks(start);
            let mut stop = self.handle(first);
            let mut handled = 1;
            while handled < INPUT_BATCH_MAX && !stop && woke.elapsed() < batch_for {
                match self.inputs.try_recv() {
                    Ok(input) => {
                        self.catch_up_ticks(start);
                        stop = self.handle(input);
                        handled += 1;
                    }
                    Err(_) => break,
                }
            }
            self.catch_up_ticks(start);
            let handled_at = Instant::now();
            self.finish_snapshot()?;
            let snapshot_at = Instant::now();
            self.process_ready()?;
            let now = self.now_us();
            self.pipeline.expire_keepalives(now);
            self.deliver();
            self.publish();
            let took = woke.elapsed();
            if took > stall {
                tracing::warn!(
                    event = "driver_stalled",
                    node = self.id,
                    took_ms = took.as_millis() as u64,
                    inputs = handled,
                    inputs_ms = (handled_at - woke).as_millis() as u64,
                    snapshot_ms = (snapshot_at - handled_at).as_millis() as u64,
                    ready_ms = snapshot_at.elapsed().as_millis() as u64,
                    "one pass of the driver took {} ms, over half an election timeout",
                    took.as_millis()
                );
            }
            if stop {
                break;
            }
        }
        // Whatever still waits may yet be committed by the others.
        self.pipeline.stop();
        self.deliver();
        // A snapshot being written is left unrecorded (the log keeps what it covers), but
        // its thread must be done with the directory before the storage is closed.
        if let Some(thread) = self.snapshot_thread.take() {
            let _ = thread.join();
        }
        Ok(())
    }

    /// Encode and write the node's own snapshot on a thread of its own, so that neither
    /// stalls the node: the image is a frozen copy of the state, and the storage keeps
    /// every entry the snapshot covers until [`Driver::finish_snapshot`] records it.
    fn start_snapshot(&mut self, image: SnapshotImage) {
        assert!(
            self.snapshot_thread.is_none(),
            "node {}: a second background snapshot while one is under way",
            self.id
        );
        let writer = self.storage.snapshot_writer();
        let done = self.snapshot_done.0.clone();
        let wake = self.wake.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tenure-snapshot-{}", self.id))
            .spawn(move || {
                lower_thread_priority();
                let started = Instant::now();
                let snapshot = image.encode();
                // The image's share of the state goes here, not when the driver joins.
                drop(image);
                let encode = started.elapsed();
                let started = Instant::now();
                let written = writer.write(&snapshot);
                let write = started.elapsed();
                let _ = done.send(SnapshotDone {
                    snapshot,
                    written,
                    encode,
                    write,
                });
                // A full queue wakes the driver anyway; the next tick's wake-up does too.
                if let Some(inputs) = wake.upgrade() {
                    let _ = inputs.try_send(Input::Wake);
                }
            });
        match spawned {
            Ok(thread) => self.snapshot_thread = Some(thread),
            Err(e) => {
                tracing::warn!(
                    node = self.id,
                    "cannot start the snapshot thread, the snapshot is skipped: {e}"
                );
                self.metrics.snapshot_failures.fetch_add(1, Relaxed);
                self.pipeline.snapshot_failed();
            }
        }
    }

    /// The background snapshot's thread is done: hand it to the node, then record it in the
    /// log (which may then discard the entries it covers) if the node adopted it, or remove
    /// it if a leader's snapshot overtook it (`tenure_driver::finish_background_snapshot`).
    fn finish_snapshot(&mut self) -> Result<(), StorageFailed> {
        // The thread reports before it ends, so one that had ended before this look with
        // nothing reported panicked.
        let ended = self
            .snapshot_thread
            .as_ref()
            .is_some_and(|t| t.is_finished());
        let done = match self.snapshot_done.1.try_recv() {
            Ok(done) => done,
            Err(_) if ended => {
                self.snapshot_thread_died();
                return Ok(());
            }
            Err(_) => return Ok(()),
        };
        if let Some(thread) = self.snapshot_thread.take() {
            let _ = thread.join();
        }
        let SnapshotDone {
            snapshot,
            written,
            encode,
            write,
        } = done;
        let written = match written {
            Ok(written) => written,
            Err(e) => {
                // Nothing is lost: the log still holds every entry. The node takes another
                // snapshot at its next snapshot point.
                tracing::warn!(
                    node = self.id,
                    index = snapshot.index,
                    "cannot write a snapshot, the log keeps its entries: {e}"
                );
                self.metrics.snapshot_failures.fetch_add(1, Relaxed);
                self.pipeline.snapshot_failed();
                return Ok(());
            }
        };
        let started = Instant::now();
        let (index, term, bytes) = (snapshot.index, snapshot.term, snapshot.data.len());
        // The node decides whether the snapshot is still current, and the log follows it.
        let now = self.now_us();
        let recorded = self
            .pipeline
            .finish_snapshot(&mut self.storage, snapshot, written, now)
            .map_err(|e| StorageFailed(e.to_string()))?;
        let record = started.elapsed();
        if recorded {
            let m = &self.metrics;
            m.snapshot_bytes.store(bytes as u64, Relaxed);
            m.snapshot_index.store(index, Relaxed);
            m.snapshot_write_us
                .store((write + record).as_micros() as u64, Relaxed);
            m.snapshot_encode_ns
                .store(encode.as_nanos() as u64, Relaxed);
            tracing::debug!(
                event = "snapshot_taken",
                node = self.id,
                index,
                term,
                bytes,
                encode_ms = encode.as_millis() as u64,
                write_ms = write.as_millis() as u64,
                "compacted the log up to index {index}"
            );
        }
        Ok(())
    }

    /// The snapshot thread ended without a report (it panicked). The node would wait for that
    /// snapshot for ever and never take another: it is given up, as a failed write is.
    fn snapshot_thread_died(&mut self) {
        let thread = self
            .snapshot_thread
            .take()
            .expect("a snapshot thread ended");
        let why = thread.join().err().map_or_else(
            || "ended without a report".to_string(),
            |p| panic_message(p.as_ref()),
        );
        tracing::error!(
            node = self.id,
            "the snapshot thread died ({why}); the log keeps its entries and the next \
             snapshot point tries again"
        );
        self.metrics.snapshot_failures.fetch_add(1, Relaxed);
        self.pipeline.snapshot_failed();
    }

    fn now_us(&self) -> Micros {
        self.start.elapsed().as_micros() as Micros
    }

    /// Ticks follow the monotonic clock, not the number of wake-ups: a driver that fell
    /// behind (or a process that was stopped) catches up on every tick it owes.
    fn catch_up_ticks(&mut self, start: Instant) {
        let due = (start.elapsed().as_micros() / self.tick.as_micros().max(1)) as u64;
        let now = self.now_us();
        self.pipeline.tick_to(due, now);
    }

    /// Returns true on shutdown.
    fn handle(&mut self, input: Input) -> bool {
        match input {
            Input::Wake => {}
            Input::Shutdown => return true,
            Input::InjectPanic => panic!(
                "node {}: a panic injected on the driver thread (POST /debug/driver-panic)",
                self.id
            ),
            Input::PeerClosed(peer) => self.pipeline.node_mut().peer_connection_closed(peer),
            Input::PeerRefused(peer, epoch) => {
                self.pipeline.node_mut().peer_reconnect_refused(peer, epoch)
            }
            Input::Peer(m) => {
                // An accepted InstallSnapshot moves the node's snapshot to its index and term
                // at once; the Ready that persists it says when it is installed for good.
                let offered = match &m.body {
                    Body::InstallSnapshot { snapshot, .. } => {
                        Some((snapshot.index, snapshot.term, m.from))
                    }
                    _ => None,
                };
                let before = offered.map(|_| self.pipeline.node().snapshot_meta());
                if let Err(e) = self.pipeline.node_mut().step(m) {
                    self.metrics.bad_peer_messages.fetch_add(1, Relaxed);
                    tracing::warn!("refused peer message: {e}");
                }
                if let Some((index, term, from)) = offered {
                    let after = self.pipeline.node().snapshot_meta();
                    if after == (index, term) && before != Some(after) {
                        self.snapshot_installing = Some((index, term, from));
                    }
                }
                let now = self.now_us();
                self.pipeline.observe(now);
                self.note_committed();
            }
            Input::Client(req, queued) => self.handle_client(req, queued),
        }
        false
    }

    fn handle_client(&mut self, req: ClientRequest, queued: Instant) {
        let now = self.now_us();
        match req {
            ClientRequest::Propose {
                request,
                command,
                reply,
            } => {
                self.metrics.stages.write_queue.observe(queued.elapsed());
                let taken = Instant::now();
                let (node, core) = self.pipeline.parts();
                let waiting = core.proposals_pending();
                core.propose(node, now, request, command, reply);
                // Timed only when it went into the leader's log (not refused at once).
                if core.proposals_pending() > waiting && node.role() == Role::Leader {
                    self.times.proposed.get_or_insert(taken);
                }
            }
            ClientRequest::KeepAlive {
                session,
                secret_hash,
                principal,
                bind,
                reply,
            } => {
                self.metrics
                    .stages
                    .keepalive_queue
                    .observe(queued.elapsed());
                let owner = self.pipeline.node().state_machine().session_owner(session);
                if let (Some(principal), Some(owner)) = (principal.as_deref(), owner) {
                    if principal != owner {
                        let refusal = tenure_core::sm::SmError::NotOwner(session);
                        let _ = reply.send(Err(ApiError::Rejected(refusal)));
                        return;
                    }
                }
                let (node, core) = self.pipeline.parts();
                core.keepalive_bound(node, now, session, secret_hash, bind, reply);
            }
            ClientRequest::StreamEnded { stream, end } => {
                let (node, core) = self.pipeline.parts();
                core.stream_ended(node, now, stream, end);
            }
            ClientRequest::TransferLeader { to, reply } => {
                // 0 names no node: the leader picks the voter that is most caught up.
                let to = match to {
                    0 if self.pipeline.node().role() == Role::Leader => {
                        match most_caught_up_voter(
                            &self.pipeline.node().status(),
                            &self.pipeline.node().progress(),
                        ) {
                            Some(id) => id,
                            None => {
                                let why = "there is no other voter to hand leadership to";
                                let _ = reply.send(Err(ApiError::Invalid(why.into())));
                                return;
                            }
                        }
                    }
                    to => to,
                };
                let transferred = self.pipeline.node_mut().transfer_leadership(to);
                let _ = reply.send(transferred.map_err(Into::into));
                // The transfer under way is what tells a step-down's reason later.
                self.pipeline.observe(now);
            }
            ClientRequest::ChangeMembership {
                voters,
                learners,
                reply,
            } => {
                let r = self
                    .pipeline
                    .node_mut()
                    .change_membership(voters, learners)
                    .map_err(Into::into);
                let _ = reply.send(r);
                self.pipeline.observe(now);
            }
            ClientRequest::ListElections {
                after,
                limit,
                reply,
            } => {
                let _ = reply.send(Ok(self.list_elections(&after, limit)));
            }
            ClientRequest::ListSessions {
                after,
                limit,
                reply,
            } => {
                let _ = reply.send(Ok(self.list_sessions(after, limit)));
            }
            ClientRequest::AppliedImage { reply } => {
                let _ = reply.send(Ok(self.pipeline.node().applied_image()));
            }
            ClientRequest::ListKeys {
                prefix,
                after,
                limit,
                reply,
            } => {
                let sm = self.pipeline.node().state_machine();
                let _ = reply.send(Ok(Listing {
                    page: sm.keys_page(&prefix, &after, limit),
                    applied_index: sm.applied_index(),
                }));
            }
        }
    }

    /// One page of the applied elections (see [`ClientRequest::ListElections`]).
    fn list_elections(&self, after: &str, limit: usize) -> ElectionListing {
        let sm = self.pipeline.node().state_machine();
        let page = sm.elections_page(after, limit);
        let items = page
            .items
            .into_iter()
            .map(|e| {
                let since = self.election_since.get(&e.name).copied().unwrap_or(0);
                (e, since)
            })
            .collect();
        Listing {
            page: tenure_core::sm::list::Page {
                items,
                more: page.more,
            },
            applied_index: sm.applied_index(),
        }
    }

    /// One page of the applied sessions (see [`ClientRequest::ListSessions`]).
    fn list_sessions(&self, after: SessionId, limit: usize) -> SessionListing {
        let sm = self.pipeline.node().state_machine();
        let now = self.pipeline.node().status().now_tick;
        let tick_ms = self.tick.as_millis() as u64;
        let page = sm.sessions_page(after, limit);
        let items = page
            .items
            .into_iter()
            .map(|s| {
                let deadline = self
                    .pipeline
                    .node()
                    .session_deadline_tick(s.id)
                    .unwrap_or(now);
                let remaining_ms = deadline.saturating_sub(now).saturating_mul(tick_ms);
                (s, remaining_ms)
            })
            .collect();
        Listing {
            page: tenure_core::sm::list::Page {
                items,
                more: page.more,
            },
            applied_index: sm.applied_index(),
        }
    }

    /// Every Ready the node has, through the pipeline shared with the simulator: written,
    /// a leader's AppendEntries sent between the write and its fsync (so that followers
    /// store the entries while this disk does: one fsync's wait per write, not two in a
    /// row), synced, advanced, the rest sent and the answers decided.
    fn process_ready(&mut self) -> Result<(), StorageFailed> {
        let storage_failed = |e: S::Error| StorageFailed(e.to_string());
        loop {
            let started = Instant::now();
            let mut snapshot_bytes = None;
            let mut leader_appended = None;
            let (outbox, logged, metrics, id) = (
                &self.outbox,
                &mut self.snapshots_sent_logged,
                &*self.metrics,
                self.id,
            );
            let mut send = |m: Message| {
                if let Body::InstallSnapshot { snapshot, .. } = &m.body {
                    let (index, term, bytes) = (snapshot.index, snapshot.term, snapshot.data.len());
                    log_snapshot_sent(logged, metrics, id, m.to, index, term, bytes);
                }
                outbox.send(m);
            };
            let wrote = self
                .pipeline
                .write(&mut self.storage, &mut send, |node, persist| {
                    snapshot_bytes = persist.snapshot.as_ref().map(|s| s.data.len());
                    if node.role() == Role::Leader {
                        leader_appended = persist.entries.last().map(|e| e.index);
                    }
                })
                .map_err(storage_failed)?;
            let Some(wrote) = wrote else { break };
            let written = started.elapsed();
            // Only writes that carry a client's proposal are timed (not the leader's own
            // entries: lease checkpoints, expiries).
            if let (Some(index), Some(proposed)) = (leader_appended, self.times.proposed) {
                let waited = started.saturating_duration_since(proposed);
                self.metrics.stages.propose.observe(waited);
                self.times.replicating.push_back((index, started));
                self.times.proposed = None;
            }
            self.pipeline
                .sync(&mut self.storage)
                .map_err(storage_failed)?;
            let took = started.elapsed();
            if wrote.must_sync {
                self.metrics.stages.wal_write.observe(written);
                self.metrics.stages.wal_fsync.observe(took - written);
            }
            let now = self.start.elapsed().as_micros() as Micros;
            let finished = self.pipeline.advance(now, &mut send);
            self.note_committed();
            if wrote.must_sync {
                self.metrics.fsync_latency.observe(took);
                if let (Some(bytes), Some((index, _))) =
                    (snapshot_bytes, finished.snapshot_persisted)
                {
                    let m = &self.metrics;
                    m.snapshot_bytes.store(bytes as u64, Relaxed);
                    m.snapshot_index.store(index, Relaxed);
                    m.snapshot_write_us.store(took.as_micros() as u64, Relaxed);
                }
            }
            if let Some((index, term)) = finished.snapshot_persisted {
                self.log_snapshot_persisted(index, term);
            }
            if let Some(image) = finished.snapshot_image {
                self.start_snapshot(image);
            }
            for change in finished.leader_changes {
                self.election_since
                    .insert(change.election.clone(), change.index);
                let _ = self.leader_changes.send(change);
            }
            // Deleted elections leave their entry behind: drop them once they could be as
            // many as the elections that exist (amortized, so a tenant that creates and
            // deletes elections without end costs no memory here).
            let sm = self.pipeline.node().state_machine();
            if self.election_since.len() > 2 * sm.records() + 64 {
                self.election_since.retain(|name, _| sm.token(name) != 0);
            }
        }
        self.deliver();
        Ok(())
    }

    /// The leader's writes the node now knows committed (after a message it stepped, or a
    /// Ready it advanced): how long each waited for a majority from the start of its write
    /// (`tenure_stage_seconds{stage="replicate"}`). A node that no longer leads forgets what
    /// it was timing.
    fn note_committed(&mut self) {
        let node = self.pipeline.node();
        if node.role() != Role::Leader {
            self.times = WriteTimes::default();
            return;
        }
        let commit = node.commit_index();
        // Read the clock only when something committed (not on every heartbeat's answer).
        let mut now = None;
        while let Some(&(index, written)) = self.times.replicating.front() {
            if index > commit {
                break;
            }
            let now = *now.get_or_insert_with(Instant::now);
            self.metrics.stages.replicate.observe(now - written);
            self.times.replicating.pop_front();
            self.times.committed = Some(now);
        }
    }

    /// Hands the driver core's answers to the waiting API calls and its events to the
    /// metrics.
    fn deliver(&mut self) {
        let out = self.pipeline.drain();
        let committed = self.times.committed;
        for a in out.answers {
            let answer = match a.outcome {
                Outcome::Applied { index, response } => {
                    if let Some(at) = committed {
                        self.metrics.stages.apply.observe(at.elapsed());
                        self.times.committed = None;
                    }
                    Ok((index, response))
                }
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
        let node = self.id;
        // One log line per thing that happens, with stable field names (`event` first): an
        // operator greps for `event=step_down`, a log pipeline reads the JSON fields.
        for event in out.events {
            self.sink.note(node, &event);
            // The event's name and words are the driver's (`Event::kind`, `Event::worded`),
            // the same as the dashboard's journal shows.
            let kind = event.kind(node);
            let words = event.worded(node);
            match &event {
                Event::Committed { latency_us } => m.commit_latency.observe(us(*latency_us)),
                Event::Renewed { latency_us } => m.lease_renewal.observe(us(*latency_us)),
                Event::LeaseAgeAtRenewal { age_us } => m.lease_age_at_renewal.observe(us(*age_us)),
                Event::Core(NodeEvent::SteppedDown { term, reason }) => {
                    m.step_downs.fetch_add(1, Relaxed);
                    log_step_down(node, *term, *reason, &words);
                }
                Event::Core(NodeEvent::PreVoteLost { term }) => {
                    m.pre_votes_lost.fetch_add(1, Relaxed);
                    self.pre_votes_lost_in_a_row += 1;
                    let lost = self.pre_votes_lost_in_a_row;
                    // A node that cannot win (a removed member, one the others refuse)
                    // pre-votes every election timeout: the first lost round of a streak
                    // is news, the rest are debug.
                    if lost == 1 {
                        tracing::info!(event = kind, node, term, "{words}");
                    } else {
                        tracing::debug!(event = kind, node, term, lost_in_a_row = lost, "{words}");
                    }
                }
                Event::Core(NodeEvent::ElectionStarted { term, pre_vote }) => {
                    if !pre_vote {
                        self.pre_votes_lost_in_a_row = 0;
                        m.elections_started.fetch_add(1, Relaxed);
                    }
                    if *pre_vote && self.pre_votes_lost_in_a_row > 0 {
                        tracing::debug!(event = kind, node, term, pre_vote, "{words}");
                    } else {
                        tracing::info!(event = kind, node, term, pre_vote, "{words}");
                    }
                }
                Event::LeaderKnown {
                    term,
                    leader,
                    leaderless_us,
                } => {
                    m.leader_changes.fetch_add(1, Relaxed);
                    self.pre_votes_lost_in_a_row = 0;
                    if let Some(gap) = leaderless_us {
                        m.failover.observe(us(*gap));
                    }
                    let leaderless_ms = leaderless_us.map(|gap| gap as f64 / 1000.0);
                    tracing::info!(event = kind, node, term, leader, leaderless_ms, "{words}");
                }
                // The driver reports a leader won or learned of as `Event::LeaderKnown`.
                Event::Core(NodeEvent::BecameLeader { .. } | NodeEvent::LeaderKnown { .. }) => {}
                Event::Core(NodeEvent::LeaderGone { term, leader }) => {
                    m.fast_elections.fetch_add(1, Relaxed);
                    tracing::info!(event = kind, node, term, leader, "{words}");
                }
                Event::Core(NodeEvent::MembershipChanged { from, to }) => {
                    m.membership_changes.fetch_add(1, Relaxed);
                    let (from, to_text) = (from.to_string(), to.to_string());
                    tracing::info!(
                        event = kind,
                        node,
                        from = from.as_str(),
                        to = to_text.as_str(),
                        voters = ids(&to.voters).as_str(),
                        voters_outgoing = ids(&to.voters_outgoing).as_str(),
                        learners = ids(&to.learners).as_str(),
                        joint = to.is_joint(),
                        "{words}"
                    );
                }
                Event::SessionExpired { session } => {
                    m.session_expiries.fetch_add(1, Relaxed);
                    tracing::info!(event = kind, node, session, "{words}");
                }
                Event::SessionReleased { session } => {
                    m.session_releases.fetch_add(1, Relaxed);
                    tracing::info!(event = kind, node, session, "{words}");
                }
                Event::FencedRejection {
                    key,
                    election,
                    token,
                    current,
                    error,
                } => {
                    m.fenced_rejections.fetch_add(1, Relaxed);
                    // Keys and election names are the clients' strings: string fields are
                    // written quoted and escaped (text) or as JSON strings, so that none can
                    // forge a line. Values are never logged.
                    let reason = error.to_string();
                    tracing::info!(
                        event = kind,
                        node,
                        key = key.as_str(),
                        election = election.as_str(),
                        token,
                        current,
                        reason = reason.as_str(),
                        "{words}"
                    );
                }
                Event::ElectionLeaderChanged => {
                    m.election_leader_changes.fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// A Ready's snapshot is durable: a leader's that this node accepted is installed now;
    /// any other is this node's own, taken inside its step (only without
    /// `Config::snapshot_in_background`; the server takes its own in the background, see
    /// [`Driver::finish_snapshot`]).
    fn log_snapshot_persisted(&mut self, index: Index, term: Term) {
        match self.snapshot_installing.take() {
            // A later snapshot of this node's own (compaction in the same batch) carries
            // the installed one's state too.
            Some((installed, installed_term, leader)) if index >= installed => {
                self.metrics.snapshots_installed.fetch_add(1, Relaxed);
                tracing::info!(
                    event = "snapshot_installed",
                    node = self.id,
                    index = installed,
                    term = installed_term,
                    leader,
                    "installed a snapshot from node {leader} up to index {installed}"
                );
            }
            pending => {
                self.snapshot_installing = pending;
                tracing::debug!(
                    event = "snapshot_taken",
                    node = self.id,
                    index,
                    term,
                    "compacted the log up to index {index}"
                );
            }
        }
    }

    fn publish(&mut self) {
        self.outbox
            .set_follow_epoch(self.pipeline.node().follow_epoch());
        let status = self.pipeline.node().status();
        self.note_committed();
        let m = &self.metrics;
        m.term.store(status.term, Relaxed);
        m.leader_id.store(status.leader.unwrap_or(0), Relaxed);
        m.is_leader
            .store(u64::from(status.role == Role::Leader), Relaxed);
        m.commit_index.store(status.commit, Relaxed);
        m.applied_index.store(status.applied, Relaxed);
        let sessions = self.pipeline.node().state_machine().session_count();
        m.sessions.store(sessions as u64, Relaxed);
        {
            let usage = self.pipeline.node().state_machine().usages();
            let mut published = m.principal_usage.lock().unwrap_or_else(|p| p.into_inner());
            // Cloned only on the rare batch that changed what some principal holds.
            if *published != *usage {
                *published = usage.clone();
            }
        }
        let progress = self.pipeline.node().progress();
        let (changed, members) = {
            let current = self.published.borrow();
            let directory = self.pipeline.node().state_machine().members();
            // The directory is cloned only on the rare batch that changed it.
            let members = if *current.members == *directory {
                Arc::clone(&current.members)
            } else {
                Arc::new(directory.clone())
            };
            let changed = current.status != status
                || current.sessions != sessions
                || current.progress != progress
                || !Arc::ptr_eq(&current.members, &members);
            (changed, members)
        };
        if changed {
            let _ = self.published.send(Published {
                status,
                sessions,
                progress,
                members,
            });
        }
    }

    /// Read-only access for the API layer's snapshot reads is through the log; this is for
    /// tests.
    pub fn node(&self) -> &Node {
        self.pipeline.node()
    }
}

/// The leader sends a snapshot to a follower whose entries it no longer has, again once
/// per election timeout until acknowledged: the first send of each index is logged at
/// info, the resends at debug. Every send is counted.
fn log_snapshot_sent(
    logged: &mut BTreeMap<NodeId, Index>,
    metrics: &Metrics,
    node: NodeId,
    peer: NodeId,
    index: Index,
    term: Term,
    bytes: usize,
) {
    metrics.snapshots_sent.fetch_add(1, Relaxed);
    if logged.insert(peer, index) != Some(index) {
        tracing::info!(
            event = "snapshot_sent",
            node,
            peer,
            index,
            term,
            bytes,
            "sent a snapshot up to index {index} to node {peer}, which is behind the log"
        );
    } else {
        tracing::debug!(
            event = "snapshot_resent",
            node,
            peer,
            index,
            term,
            bytes,
            "sent the snapshot up to index {index} to node {peer} again"
        );
    }
}

/// The voter other than the leader itself whose log is furthest along (the highest match
/// index; among equals the one heard from last, then the lowest id): where a transfer that
/// names no target goes, because it can take over with the shortest catch-up. `None` when
/// the leader is the only voter.
pub fn most_caught_up_voter(
    status: &Status,
    progress: &BTreeMap<NodeId, PeerProgress>,
) -> Option<NodeId> {
    progress
        .iter()
        .filter(|(id, _)| **id != status.id && status.membership.is_voter(**id))
        .max_by(|(a_id, a), (b_id, b)| {
            (a.match_index, a.heard_tick)
                .cmp(&(b.match_index, b.heard_tick))
                .then(b_id.cmp(a_id))
        })
        .map(|(id, _)| *id)
}

/// A step-down is a warning unless it was a transfer someone asked for.
fn log_step_down(
    node: NodeId,
    term: Term,
    reason: StepDownReason,
    words: &tenure_driver::Worded<'_>,
) {
    let (to, seen_term) = match reason {
        StepDownReason::Transferred { to } | StepDownReason::TransferTimedOut { to } => {
            (Some(to), None)
        }
        StepDownReason::HigherTerm { term } => (None, Some(term)),
        StepDownReason::Removed | StepDownReason::LostQuorum => (None, None),
    };
    let reason_name = reason.name();
    // A planned hand-over is news; any other step-down is a warning. (Tracing's level is
    // part of each call site, hence the macro.)
    macro_rules! step_down {
        ($level:ident) => {
            tracing::$level!(
                event = "step_down",
                node,
                term,
                reason = reason_name,
                to,
                seen_term,
                "{words}"
            )
        };
    }
    if reason.is_planned() {
        step_down!(info);
    } else {
        step_down!(warn);
    }
}

/// Node ids as `1,2,3` (empty for none).
fn ids(set: &BTreeSet<NodeId>) -> String {
    set.iter()
        .map(NodeId::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(membership: Membership) -> Status {
        Status {
            id: 1,
            role: Role::Leader,
            term: 3,
            vote: Some(1),
            leader: Some(1),
            commit: 10,
            applied: 10,
            last_index: 10,
            persisted_index: 10,
            membership,
            membership_epoch: 1,
            transferring_to: None,
            lease_until_tick: None,
            now_tick: 100,
        }
    }

    fn peer(match_index: Index, heard_tick: Option<u64>) -> PeerProgress {
        PeerProgress {
            match_index,
            heard_tick,
        }
    }

    /// What the driver does with its disk and its peers, in order.
    type Trail = Arc<std::sync::Mutex<Vec<String>>>;

    /// A memory disk that records what the driver does with it; its background snapshot
    /// writer panics if `writer_panics` (the thread then dies without a report).
    struct RecordingStorage {
        disk: tenure_core::storage::MemStorage,
        trail: Trail,
        writer_panics: bool,
    }

    impl RecordingStorage {
        fn new(trail: Trail) -> RecordingStorage {
            RecordingStorage {
                disk: Default::default(),
                trail,
                writer_panics: false,
            }
        }
    }

    /// [`RecordingStorage`]'s snapshot writer.
    struct TestWriter {
        panics: bool,
    }

    impl tenure_core::storage::SnapshotWriter for TestWriter {
        type Written = tenure_core::types::Snapshot;
        type Error = std::convert::Infallible;
        fn write(
            self,
            snapshot: &tenure_core::types::Snapshot,
        ) -> Result<tenure_core::types::Snapshot, Self::Error> {
            assert!(!self.panics, "the snapshot writer fails hard (test)");
            Ok(snapshot.clone())
        }
    }

    impl tenure_core::storage::Storage for RecordingStorage {
        type Error = tenure_core::storage::SnapshotNotNewer;
        fn recover(&mut self) -> Result<tenure_core::types::Recovered, Self::Error> {
            self.disk.recover()
        }
        fn persist(
            &mut self,
            hs: Option<&tenure_core::types::HardState>,
            snapshot: Option<&tenure_core::types::Snapshot>,
            entries: &[tenure_core::types::Entry],
        ) -> Result<(), Self::Error> {
            self.trail.lock().unwrap().push("persist".into());
            self.disk.persist(hs, snapshot, entries)
        }
        fn persist_commit(
            &mut self,
            hs: &tenure_core::types::HardState,
        ) -> Result<(), Self::Error> {
            self.trail.lock().unwrap().push("persist_commit".into());
            self.disk.persist_commit(hs)
        }
        fn write(
            &mut self,
            hs: Option<&tenure_core::types::HardState>,
            snapshot: Option<&tenure_core::types::Snapshot>,
            entries: &[tenure_core::types::Entry],
        ) -> Result<(), Self::Error> {
            self.trail.lock().unwrap().push("write".into());
            self.disk.persist(hs, snapshot, entries)
        }
        fn sync(&mut self) -> Result<(), Self::Error> {
            self.trail.lock().unwrap().push("sync".into());
            Ok(())
        }
    }

    impl tenure_core::storage::BackgroundSnapshots for RecordingStorage {
        type Writer = TestWriter;
        type Written = tenure_core::types::Snapshot;
        fn snapshot_writer(&mut self) -> Self::Writer {
            TestWriter {
                panics: self.writer_panics,
            }
        }
        fn record_snapshot(&mut self, written: Self::Written) -> Result<(), Self::Error> {
            self.trail.lock().unwrap().push("record_snapshot".into());
            self.disk.record_snapshot(written)
        }
        fn discard_snapshot(&mut self, written: Self::Written) -> Result<(), Self::Error> {
            self.trail.lock().unwrap().push("discard_snapshot".into());
            self.disk.discard_snapshot(written)
        }
    }

    struct RecordingOutbox(Trail);

    /// The events of these tests go to the log only.
    struct NoSink;

    impl EventSink for NoSink {
        fn note(&self, _: NodeId, _: &Event) {}
    }

    impl Outbox for RecordingOutbox {
        fn send(&self, m: Message) {
            let entries = match &m.body {
                Body::AppendEntries { entries, .. } => format!(" with {}", entries.len()),
                _ => String::new(),
            };
            let line = format!("send {}{entries} to {}", m.body.kind(), m.to);
            self.0.lock().unwrap().push(line);
        }
    }

    /// Pipelined persistence: a leader's Ready that appends entries is written, its
    /// AppendEntries leave, and only then does it fsync; a candidate's vote request waits for
    /// its fsync (the term and vote must be durable first).
    #[test]
    fn a_leader_sends_its_appends_between_the_write_and_the_fsync() {
        let trail = Trail::default();
        let node = Node::new(
            tenure_core::config::Config::new(1, vec![1, 2, 3]),
            Default::default(),
        )
        .expect("valid");
        let storage = RecordingStorage::new(trail.clone());
        let (mut driver, _handle) = new_driver(
            node,
            storage,
            RecordingOutbox(trail.clone()),
            Duration::from_millis(10),
            DriverBugs::default(),
            Arc::new(NoSink),
        );
        let sent = |what: &str| trail.lock().unwrap().iter().any(|l| l.starts_with(what));
        for _ in 0..100 {
            if sent("send PreVote ") {
                break;
            }
            driver.pipeline.node_mut().tick();
            driver.process_ready().expect("memory");
        }
        assert!(sent("send PreVote "), "{:?}", trail.lock().unwrap());
        let term = driver.pipeline.node().status().term;
        let answer = |term, body| Message {
            from: 2,
            to: 1,
            term,
            body,
        };
        driver.handle(Input::Peer(answer(
            term + 1,
            Body::PreVoteResponse { granted: true },
        )));
        trail.lock().unwrap().clear();
        driver.process_ready().expect("memory");
        assert_eq!(
            trail.lock().unwrap()[..4],
            [
                "write",
                "sync",
                "send RequestVote to 2",
                "send RequestVote to 3"
            ],
            "a vote request leaves only once the new term and vote are durable"
        );
        driver.handle(Input::Peer(answer(
            term + 1,
            Body::RequestVoteResponse { granted: true },
        )));
        trail.lock().unwrap().clear();
        driver.process_ready().expect("memory");
        assert_eq!(driver.pipeline.node().role(), Role::Leader);
        assert_eq!(
            trail.lock().unwrap()[..4],
            [
                "write",
                "send AppendEntries with 1 to 2",
                "send AppendEntries with 1 to 3",
                "sync"
            ],
            "the new leader's no-op is replicated while its own fsync runs"
        );
    }

    /// A snapshot thread that dies without reporting is given up (counted as a failed
    /// snapshot), so that the node takes its next snapshot instead of waiting for that one
    /// for ever.
    #[test]
    fn a_snapshot_thread_that_dies_is_given_up_and_the_next_snapshot_starts() {
        let mut config = tenure_core::config::Config::new(1, vec![1]);
        config.snapshot_in_background = true;
        config.snapshot_threshold_entries = 5;
        config.snapshot_grows_with_state = false;
        let node = Node::new(config, Default::default()).expect("valid");
        let trail = Trail::default();
        let storage = RecordingStorage {
            writer_panics: true,
            ..RecordingStorage::new(trail.clone())
        };
        let (mut driver, _handle) = new_driver(
            node,
            storage,
            RecordingOutbox(trail),
            Duration::from_millis(10),
            DriverBugs::default(),
            Arc::new(NoSink),
        );
        for _ in 0..100 {
            if driver.pipeline.node().role() == Role::Leader {
                break;
            }
            driver.pipeline.node_mut().tick();
            driver.process_ready().expect("memory");
        }
        assert_eq!(driver.pipeline.node().role(), Role::Leader);
        // Grants until a background snapshot is started, then until its thread has died.
        let mut started = 0;
        for _ in 0..40 {
            driver
                .pipeline
                .node_mut()
                .propose(Command::Grant { ttl_ticks: 1_000 })
                .expect("the leader accepts");
            driver.process_ready().expect("memory");
            if let Some(thread) = &driver.snapshot_thread {
                started += 1;
                while !thread.is_finished() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                driver
                    .finish_snapshot()
                    .expect("a dead thread is no storage failure");
                assert!(
                    driver.snapshot_thread.is_none(),
                    "the dead thread was let go"
                );
            }
            if started == 2 {
                break;
            }
        }
        assert_eq!(
            started, 2,
            "the next snapshot point started another snapshot"
        );
        assert_eq!(driver.metrics.snapshot_failures.load(Relaxed), 2);
        assert_eq!(
            driver.pipeline.node().snapshot_meta(),
            (0, 0),
            "nothing was compacted"
        );
    }

    #[test]
    fn a_transfer_without_target_picks_the_most_caught_up_voter() {
        let mut m = Membership::new([1, 2, 3]);
        m.learners.insert(4);
        let s = status(m);
        // The learner is furthest along but cannot lead; 3 beats 2 on its log.
        let progress = BTreeMap::from([
            (2, peer(7, Some(99))),
            (3, peer(9, Some(90))),
            (4, peer(10, Some(100))),
        ]);
        assert_eq!(most_caught_up_voter(&s, &progress), Some(3));
        // Equal logs: the one heard from last, then the lowest id.
        let progress = BTreeMap::from([(2, peer(9, Some(90))), (3, peer(9, Some(95)))]);
        assert_eq!(most_caught_up_voter(&s, &progress), Some(3));
        let progress = BTreeMap::from([(2, peer(9, Some(95))), (3, peer(9, Some(95)))]);
        assert_eq!(most_caught_up_voter(&s, &progress), Some(2));
        // A leader alone among the voters has nobody to hand over to.
        let alone = status(Membership::new([1]));
        assert_eq!(most_caught_up_voter(&alone, &BTreeMap::new()), None);
    }
}
