//! Simulated clients of the election API, each with its own drifting clock.
//!
//! A client grants itself a session, keeps it alive, campaigns in one of a few elections,
//! and while it believes it leads writes fenced keys with its token. It believes it leads from
//! the moment a campaign response, a leader change or a leader read names its session, until
//! `send time of its last acknowledged keepalive (or of its grant request) + TTL − margin` on
//! its own clock (DESIGN rule 4), or until it resigns, transfers, or sees its session end or
//! another leader. Its decisions are random and some are faults: freezing past its TTL and
//! then writing with its old token, or silently stopping keepalives so its session expires.
//!
//! Every logged operation is retried until it gets an answer (on `NotLeader` at the hinted
//! node, on timeout at another node), so in the liveness phase every operation completes.
//!
//! After a resign or a transfer a client revokes its session and starts a new one, rather
//! than campaigning again with the same session: a retried Resign or Transfer of the old
//! campaign could otherwise be applied after the new campaign and end it while the client
//! believes it leads (`Resign` and `Transfer` carry no campaign generation).

use std::collections::{BTreeMap, VecDeque};

use tenure_core::drift::DriftPpm;
use tenure_core::sm::{Command, Quota, RequestId, SessionId};
use tenure_core::types::{Index, NodeId};

use crate::faults::FaultMix;
use crate::observe::{ClientId, Observation, OpId};
use crate::protocol::{ClientReply, ClientRequest};
use crate::report::Stats;
use crate::rng::SimRng;
use crate::time::{DriftingClock, SimTimeUs, TICK_NOMINAL_US, US_PER_MS};
use crate::trace::{Trace, TraceKind};

mod decide;
mod replies;
mod streams;

pub use streams::FateSharing;

/// The elections clients campaign in.
pub const ELECTIONS: [&str; 3] = ["billing", "reports", "shard-7"];
/// Local time between two decisions of a client.
const THINK_LOCAL_US: (u64, u64) = (20 * US_PER_MS, 80 * US_PER_MS);
/// Local time after which an unanswered request is retried at another node.
const REQUEST_TIMEOUT_LOCAL_US: u64 = 300 * US_PER_MS;
/// Local back-off before retrying after `NotLeader` or `Busy`.
const BACKOFF_LOCAL_US: (u64, u64) = (5 * US_PER_MS, 30 * US_PER_MS);
/// Session TTLs clients ask for, in ticks (300 ms to 1.5 s).
const TTL_TICKS: (u64, u64) = (30, 150);
/// How long a frozen client sleeps, in thousandths of its TTL (1.2 to 3 TTLs).
const FREEZE_TTL_PERMILLE: (u64, u64) = (1_200, 2_999);
/// Keepalives remembered while waiting for their acks.
const KEEPALIVES_REMEMBERED_MAX: usize = 16;
/// Most streams a fate-sharing session keeps open at once (see `streams`).
const BOUND_STREAMS_MAX: usize = 16;

/// Tenancy seeds: clients belong to one of [`TENANTS`] principals, every command they send
/// is charged to their principal (`Command::Charged`) under a small quota, and they also
/// delete elections and fenced keys.
#[derive(Clone, Copy, Debug)]
pub struct Tenancy {
    /// Each tenant's quota.
    pub quota: Quota,
    /// Per decision: probability of deleting an election (not campaigning) or its key
    /// (leading).
    pub delete: f64,
}

/// How many principals a tenancy seed's clients are split between.
pub const TENANTS: u64 = 2;

/// The fenced key an election's leader writes.
pub fn key_of(election: &str) -> String {
    format!("{election}/owner-data")
}

/// A client's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientTimer {
    /// Time to decide what to do next.
    Think {
        /// Ignored unless it matches the client's current think generation.
        generation: u64,
    },
    /// Time to send a keepalive.
    Keepalive {
        /// Ignored unless it matches the current keepalive generation.
        generation: u64,
    },
    /// The request of an operation went unanswered.
    RequestTimeout {
        /// The operation.
        op: OpId,
        /// Number of attempts when it was set.
        attempt: usize,
    },
    /// Back-off over: send the operation again.
    Resend {
        /// The operation.
        op: OpId,
    },
    /// The client's lease runs out now by its clock.
    Lapse {
        /// Ignored unless it matches the current lapse generation.
        generation: u64,
    },
    /// End of a freeze.
    Wake {
        /// Ignored unless it matches the current freeze generation.
        generation: u64,
    },
}

impl ClientTimer {
    /// A number for the trace hash.
    pub fn code(&self) -> u64 {
        match self {
            ClientTimer::Think { .. } => 1,
            ClientTimer::Keepalive { .. } => 2,
            ClientTimer::RequestTimeout { .. } => 3,
            ClientTimer::Resend { .. } => 4,
            ClientTimer::Lapse { .. } => 5,
            ClientTimer::Wake { .. } => 6,
        }
    }
}

/// Something that happens to a client.
#[derive(Clone, Debug)]
pub enum ClientInput {
    /// A reply arrived.
    Reply(ClientReply),
    /// A timer fired.
    Timer(ClientTimer),
}

/// What a client asks the world to do.
#[derive(Clone, Debug)]
pub enum ClientAction {
    /// Send a request to a node.
    Send {
        /// The node.
        to: NodeId,
        /// The request.
        request: ClientRequest,
    },
    /// Fire a timer at a true time.
    Timer {
        /// When.
        at_us: SimTimeUs,
        /// Which.
        timer: ClientTimer,
    },
    /// The client now campaigns (election, session) or no longer does; other clients use
    /// this to pick transfer targets.
    Campaigning(Option<(String, SessionId)>),
    /// The client closes its keepalive stream `stream` to node `to` (fate-sharing seeds):
    /// the node sees the close one network delay later, or once the link carries it again
    /// (TCP retransmits a FIN), unless its process ended meanwhile.
    CloseStream {
        /// The node at the other end.
        to: NodeId,
        /// The stream.
        stream: u64,
    },
}

/// What a client sees of the world while it handles an input.
pub struct ClientEnv<'a> {
    /// True simulated time.
    pub now_us: SimTimeUs,
    /// The run's random generator.
    pub rng: &'a mut SimRng,
    /// Actions for the world.
    pub out: &'a mut Vec<ClientAction>,
    /// Observations for the checkers.
    pub obs: &'a mut Vec<Observation>,
    /// The trace.
    pub trace: &'a mut Trace,
    /// Run counters.
    pub stats: &'a mut Stats,
    /// Nodes a client may contact.
    pub nodes: &'a [NodeId],
    /// Who campaigns where, for transfer targets.
    pub campaigners: &'a BTreeMap<ClientId, (String, SessionId)>,
    /// The seed's fault mix.
    pub mix: &'a FaultMix,
    /// True in the safety phase: client faults (freeze, silence) may happen.
    pub faults_on: bool,
    /// True late in the liveness phase: start no new operations.
    pub quiesced: bool,
    /// A scenario holds the workload: start no new operations and send no keepalives
    /// (retries of operations already started go on).
    pub hush: bool,
    /// The `lease-from-receive-time` bug is on.
    pub lease_from_receive: bool,
    /// Fate-sharing seeds: how sessions are bound to their streams and how often a client
    /// process exits; `None` in other seeds.
    pub fate: Option<FateSharing>,
    /// Tenancy seeds: quotas and deletes; `None` in other seeds.
    pub tenancy: Option<Tenancy>,
    /// The drift bound ρ.
    pub drift_max: DriftPpm,
    /// Source of operation ids, unique in the run.
    pub next_op: &'a mut OpId,
}

impl ClientEnv<'_> {
    fn timer_local(&mut self, clock: &DriftingClock, local_delay_us: u64, timer: ClientTimer) {
        let at_us = self.now_us + clock.true_duration(local_delay_us);
        self.out.push(ClientAction::Timer { at_us, timer });
    }

    fn timer_at_local(&mut self, clock: &DriftingClock, local_us: u64, timer: ClientTimer) {
        let at_us = clock.true_at(local_us).max(self.now_us);
        self.out.push(ClientAction::Timer { at_us, timer });
    }
}

#[derive(Clone, Copy, Debug)]
struct Session {
    id: SessionId,
    ttl_ticks: u64,
    /// Local send time of the last acknowledged keepalive, or of the grant request.
    lease_base_local_us: u64,
    /// Fate-sharing: every keepalive binds the session to the stream it is sent on.
    bound: bool,
}

impl Session {
    fn ttl_local_us(&self) -> u64 {
        self.ttl_ticks * TICK_NOMINAL_US
    }
}

#[derive(Clone, Debug)]
struct Campaign {
    election: String,
    /// Index of the applied Campaign entry, once known.
    index: Option<Index>,
    /// A Resign or Transfer is on its way: leadership news no longer makes the client believe,
    /// since that request may be applied right after the news.
    leaving: bool,
}

#[derive(Clone, Debug)]
struct Belief {
    election: String,
    token: u64,
    until_local_us: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Grant,
    Campaign,
    Resign,
    Transfer,
    Revoke,
    Put { stale: bool },
    Get,
    LeaderRead,
    DeleteElection,
}

#[derive(Clone, Copy, Debug)]
struct Attempt {
    req_id: u64,
    sent_local_us: u64,
}

#[derive(Clone, Debug)]
struct Op {
    id: OpId,
    kind: OpKind,
    command: Command,
    /// The same for every attempt, so that the cluster applies the op at most once.
    request: Option<RequestId>,
    attempts: Vec<Attempt>,
}

#[derive(Clone, Debug)]
struct Frozen {
    /// The write the client was about to make when it froze: (election, token).
    stale_write: Option<(String, u64)>,
}

/// One simulated client.
pub struct Client {
    id: ClientId,
    clock: DriftingClock,
    target: NodeId,
    session: Option<Session>,
    campaign: Option<Campaign>,
    belief: Option<Belief>,
    op: Option<Op>,
    /// Tag → (session, local send time, stream) of keepalives awaiting acks.
    keepalives: BTreeMap<u64, (SessionId, u64, Option<u64>)>,
    /// Fate-sharing: the streams this client sent a binding keepalive on and has not
    /// closed, with their node, oldest first (stream ids rise).
    bound_streams: BTreeMap<u64, NodeId>,
    /// Fate-sharing: the stream keepalives go on now, and its node.
    stream: Option<(u64, NodeId)>,
    /// Streams opened so far.
    streams_opened: u64,
    next_seq: u64,
    /// Sequence numbers of this client's requests (one counter across its sessions, so
    /// numbers are unique on each).
    next_request_seq: u64,
    think_gen: u64,
    keepalive_gen: u64,
    lapse_gen: u64,
    freeze_gen: u64,
    /// Stopped sending keepalives; the session is left to expire.
    silent: bool,
    frozen: Option<Frozen>,
    /// Inputs that arrived while frozen, handled on waking.
    deferred: VecDeque<ClientInput>,
    /// Highest index of leadership information seen, per election.
    leadership_seen: BTreeMap<String, Index>,
    /// A session to revoke before starting a new one.
    retire: Option<SessionId>,
    /// The lease ran out while campaigning: read who leads before believing again.
    verify: bool,
}

impl Client {
    /// A client with a random clock, talking to a random node at first.
    pub fn new(id: ClientId, rng: &mut SimRng, nodes: &[NodeId], drift_max: DriftPpm) -> Client {
        let clock = DriftingClock::random(rng, drift_max);
        let target = *rng.pick(nodes).expect("a cluster has nodes");
        Client {
            id,
            clock,
            target,
            session: None,
            campaign: None,
            belief: None,
            op: None,
            keepalives: BTreeMap::new(),
            bound_streams: BTreeMap::new(),
            stream: None,
            streams_opened: 0,
            next_seq: 0,
            next_request_seq: 0,
            think_gen: 0,
            keepalive_gen: 0,
            lapse_gen: 0,
            freeze_gen: 0,
            silent: false,
            frozen: None,
            deferred: VecDeque::new(),
            leadership_seen: BTreeMap::new(),
            retire: None,
            verify: false,
        }
    }

    /// The client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// True while frozen.
    pub fn is_frozen(&self) -> bool {
        self.frozen.is_some()
    }

    fn now_local(&self, env: &ClientEnv<'_>) -> u64 {
        self.clock.local_us(env.now_us)
    }

    fn next_id(&mut self) -> u64 {
        self.next_seq += 1;
        (self.id << 40) | self.next_seq
    }

    /// Starts the client's decision loop.
    pub fn start(&mut self, env: &mut ClientEnv<'_>) {
        let delay = env.rng.between(0, THINK_LOCAL_US.1);
        env.timer_local(
            &self.clock,
            delay,
            ClientTimer::Think {
                generation: self.think_gen,
            },
        );
    }

    /// Handles one input. While frozen, inputs wait until the client wakes.
    pub fn input(&mut self, input: ClientInput, env: &mut ClientEnv<'_>) {
        if self.frozen.is_some() {
            match input {
                ClientInput::Timer(ClientTimer::Wake { generation })
                    if generation == self.freeze_gen =>
                {
                    self.wake(env)
                }
                other => self.deferred.push_back(other),
            }
            return;
        }
        self.handle(input, env);
    }

    fn handle(&mut self, input: ClientInput, env: &mut ClientEnv<'_>) {
        match input {
            ClientInput::Reply(reply) => self.on_reply(reply, env),
            ClientInput::Timer(timer) => self.on_timer(timer, env),
        }
        self.check_lapse(env);
    }

    /// The liveness phase begins: wake up and resume keepalives.
    pub fn heal(&mut self, env: &mut ClientEnv<'_>) {
        if self.frozen.is_some() {
            self.wake(env);
        }
        if self.silent {
            self.silent = false;
            self.keepalive_gen += 1;
            env.timer_local(
                &self.clock,
                0,
                ClientTimer::Keepalive {
                    generation: self.keepalive_gen,
                },
            );
        }
    }

    fn wake(&mut self, env: &mut ClientEnv<'_>) {
        let Some(frozen) = self.frozen.take() else {
            return;
        };
        env.trace
            .log(env.now_us, || format!("client {} wakes up", self.id));
        if let Some((election, token)) = frozen.stale_write {
            // The write it decided on before freezing goes out now, with the old token and
            // without looking at the clock again: the store must reject it if a newer leader
            // wrote in between.
            env.stats.stale_writes_attempted += 1;
            let value = format!("client-{}-stale", self.id).into_bytes();
            let command = Command::FencedPut {
                key: key_of(&election),
                value,
                election,
                token,
            };
            self.start_op(OpKind::Put { stale: true }, command, env);
        }
        while let Some(input) = self.deferred.pop_front() {
            self.handle(input, env);
        }
        self.think_gen += 1;
        env.timer_local(
            &self.clock,
            0,
            ClientTimer::Think {
                generation: self.think_gen,
            },
        );
    }

    fn on_timer(&mut self, timer: ClientTimer, env: &mut ClientEnv<'_>) {
        match timer {
            ClientTimer::Think { generation } if generation == self.think_gen => self.think(env),
            ClientTimer::Keepalive { generation } if generation == self.keepalive_gen => {
                self.send_keepalive(env)
            }
            ClientTimer::RequestTimeout { op, attempt } => {
                let current = self
                    .op
                    .as_ref()
                    .is_some_and(|o| o.id == op && o.attempts.len() == attempt);
                if current {
                    self.retarget(None, env);
                    self.send_attempt(env);
                }
            }
            ClientTimer::Resend { op } if self.op.as_ref().is_some_and(|o| o.id == op) => {
                self.send_attempt(env)
            }
            // Lapses are checked after every input; stale generations and wakes are no-ops.
            _ => {}
        }
    }

    fn retarget(&mut self, hint: Option<NodeId>, env: &mut ClientEnv<'_>) {
        match hint.filter(|h| env.nodes.contains(h)) {
            Some(h) => self.target = h,
            None => {
                let others: Vec<NodeId> = env
                    .nodes
                    .iter()
                    .copied()
                    .filter(|n| *n != self.target)
                    .collect();
                if let Some(n) = env.rng.pick(&others) {
                    self.target = *n;
                } else if let Some(n) = env.nodes.first() {
                    self.target = *n;
                }
            }
        }
    }

    fn watch(&self) -> Option<String> {
        self.campaign.as_ref().map(|c| c.election.clone())
    }

    fn start_op(&mut self, kind: OpKind, command: Command, env: &mut ClientEnv<'_>) {
        *env.next_op += 1;
        let id = *env.next_op;
        env.trace.event(
            TraceKind::ClientOp,
            env.now_us,
            &[self.id, id, crate::hash::of_command(&command)],
        );
        env.obs.push(Observation::OpInvoked {
            op: id,
            client: self.id,
            command: command.clone(),
        });
        let request = self.request_id_for(kind, &command, env);
        self.op = Some(Op {
            id,
            kind,
            command,
            request,
            attempts: Vec::new(),
        });
        self.send_attempt(env);
    }

    /// The request id an op carries, as the `tenure` client library gives them: a random
    /// nonce for a grant, the next sequence number on the session for anything else that
    /// changes state. Reads carry none (retrying them is harmless), nor does a frozen
    /// client's late write: it models a writer that never heard of request ids, so that
    /// the store's token check alone stands between it and the data.
    fn request_id_for(
        &mut self,
        kind: OpKind,
        command: &Command,
        env: &mut ClientEnv<'_>,
    ) -> Option<RequestId> {
        let session = match (kind, command) {
            (OpKind::Grant, _) => {
                return Some(RequestId::Grant {
                    nonce: env.rng.below(u64::MAX - 1) + 1,
                })
            }
            // A delete of an election is idempotent: a retry finds it gone and says so.
            (
                OpKind::Get
                | OpKind::LeaderRead
                | OpKind::Put { stale: true }
                | OpKind::DeleteElection,
                _,
            ) => return None,
            (_, Command::Revoke { session })
            | (_, Command::Campaign { session, .. })
            | (_, Command::Resign { session, .. })
            | (_, Command::Transfer { from: session, .. }) => *session,
            _ => self.session?.id,
        };
        self.next_request_seq += 1;
        Some(RequestId::Session {
            session,
            seq: self.next_request_seq,
        })
    }

    fn send_attempt(&mut self, env: &mut ClientEnv<'_>) {
        let req_id = self.next_id();
        let now_local = self.now_local(env);
        let watch = self.watch();
        let Some(op) = self.op.as_mut() else { return };
        op.attempts.push(Attempt {
            req_id,
            sent_local_us: now_local,
        });
        let command = match env.tenancy {
            Some(tenancy) => Command::Charged {
                principal: format!("tenant-{}", self.id % TENANTS),
                quota: tenancy.quota,
                command: Box::new(op.command.clone()),
            },
            None => op.command.clone(),
        };
        let request = ClientRequest::Propose {
            req_id,
            request: op.request,
            command,
            watch,
        };
        let timer = ClientTimer::RequestTimeout {
            op: op.id,
            attempt: op.attempts.len(),
        };
        env.out.push(ClientAction::Send {
            to: self.target,
            request,
        });
        env.timer_local(&self.clock, REQUEST_TIMEOUT_LOCAL_US, timer);
    }

    fn backoff(&mut self, env: &mut ClientEnv<'_>) {
        let Some(op) = self.op.as_ref() else { return };
        let delay = env.rng.between(BACKOFF_LOCAL_US.0, BACKOFF_LOCAL_US.1);
        env.timer_local(&self.clock, delay, ClientTimer::Resend { op: op.id });
    }

    fn is_latest_attempt(&self, req_id: u64) -> bool {
        self.op
            .as_ref()
            .and_then(|o| o.attempts.last())
            .is_some_and(|a| a.req_id == req_id)
    }

    fn send_keepalive(&mut self, env: &mut ClientEnv<'_>) {
        if self.silent {
            return;
        }
        let Some(session) = self.session else { return };
        if env.hush {
            // Held, not stopped: try again later, as a client whose process stalls would.
            env.timer_local(
                &self.clock,
                (session.ttl_local_us() / 3).max(TICK_NOMINAL_US),
                ClientTimer::Keepalive {
                    generation: self.keepalive_gen,
                },
            );
            return;
        }
        let stream = if session.bound {
            match self.keepalive_stream(env) {
                Some(stream) => Some(stream),
                // The session was given up (too many streams held open).
                None => return,
            }
        } else {
            None
        };
        let tag = self.next_id();
        let now_local = self.now_local(env);
        self.keepalives.insert(tag, (session.id, now_local, stream));
        while self.keepalives.len() > KEEPALIVES_REMEMBERED_MAX {
            self.keepalives.pop_first();
        }
        env.trace.detail(env.now_us, || {
            format!(
                "client {} sends keepalive {tag:#x} for session {} to node {}",
                self.id, session.id, self.target
            )
        });
        let request = ClientRequest::Keepalive {
            session: session.id,
            tag,
            watch: self.watch(),
            stream,
        };
        env.out.push(ClientAction::Send {
            to: self.target,
            request,
        });
        let interval = (session.ttl_local_us() / 3).max(TICK_NOMINAL_US);
        env.timer_local(
            &self.clock,
            interval,
            ClientTimer::Keepalive {
                generation: self.keepalive_gen,
            },
        );
    }
}
