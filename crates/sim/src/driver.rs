//! The per-node driver: owns a `Node`, its simulated disk and its log mirror, and handles each
//! Ready in the order written on `Ready`:
//!
//! 1. persist snapshot, entries and hard state to the simulated disk and fsync;
//! 2. `advance()`;
//! 3. send the messages;
//! 4. answer clients: what each proposal and keepalive is answered is decided by
//!    [`tenure_driver::DriverCore`], the same code the server's driver thread runs, so the
//!    checkers judge exactly the answers real clients get; leader changes go to watchers.
//!
//! Ready is taken again until `has_ready()` is false. A crash between 1's write and its fsync
//! loses (or tears) the write and the Ready's messages are never sent.

use std::collections::{BTreeMap, VecDeque};

use tenure_core::config::Config;
use tenure_core::event::NodeEvent;
use tenure_core::message::Body;
use tenure_core::node::{Bind, Node, ProposeError, Ready, Role, SnapshotImage, Status, StreamEnd};
use tenure_core::types::{Index, NodeId, Term};
use tenure_driver::{
    DriverBugs, DriverCore, Event, Failure, KeepaliveOutcome, Outcome, ReadyParts,
};

use crate::core_call::in_core;
use crate::disk::{Disk, TornWrite};
use crate::history::History;
use crate::mirror::{EntryKind, LogMirror, Lookup};
use crate::observe::{ClientId, Observation};
use crate::protocol::{Addr, ClientReply, ClientRequest, Packet};
use crate::report::Stats;
use crate::rng::SimRng;
use crate::time::SimTimeUs;
use crate::trace::{Trace, TraceKind};
use tenure_core::storage::{BackgroundSnapshots as _, SnapshotWriter as _};
use tenure_wal::{FileSnapshotWriter, MemFs, WrittenSnapshot};

/// The rest of a Ready whose fsync is still running (pipelined persistence): what is done
/// once it is durable.
#[derive(Debug)]
struct AfterFsync {
    messages: Vec<tenure_core::message::Message>,
    snapshot_index: Option<Index>,
    applied_through: Index,
    applied: Vec<tenure_core::node::Applied>,
    leader_changes: Vec<tenure_core::sm::LeaderChange>,
    keepalive_acks: Vec<tenure_core::node::KeepaliveAck>,
    reads: Vec<tenure_core::read::ReadResult>,
    events: Vec<tenure_core::event::NodeEvent>,
}

/// Who a proposal's answer goes to: the driver core's reply handle in the simulator.
#[derive(Clone, Copy, Debug)]
struct ProposalFrom {
    client: ClientId,
    req_id: u64,
}

/// Who a keepalive's answer goes to, with the client's own tag.
#[derive(Clone, Copy, Debug)]
struct KeepaliveFrom {
    client: ClientId,
    tag: u64,
}

/// Most ended streams a node remembers, so that a keepalive arriving on one after its end
/// (which TCP would never deliver) is dropped.
const ENDED_STREAMS_MAX: usize = 4_096;

/// A stream of keepalives a client opened to this node (fate-sharing seeds): the server's
/// API layer's view of it, as the server's `KeepAlive` handler has one.
#[derive(Clone, Copy, Debug)]
pub struct OpenStream {
    /// The client at the other end.
    pub client: ClientId,
    /// Since when (true time) the client has been unreachable or unresponsive, as the
    /// server's pings would find it; `None` while it answers.
    pub unresponsive_since_us: Option<SimTimeUs>,
}

/// The pieces of the world a driver needs while handling one input.
pub struct DriveCtx<'a> {
    /// True simulated time.
    pub now_us: SimTimeUs,
    /// The run's random generator.
    pub rng: &'a mut SimRng,
    /// The trace.
    pub trace: &'a mut Trace,
    /// Run counters.
    pub stats: &'a mut Stats,
    /// Observations for the checkers.
    pub obs: &'a mut Vec<Observation>,
    /// Cluster records (committed fingerprints).
    pub history: &'a mut History,
    /// Packets to send: (from, to, packet).
    pub out: &'a mut Vec<(Addr, Addr, Packet)>,
    /// Probability of crashing right after sending a granted vote (0 outside the safety phase).
    pub crash_after_vote: f64,
    /// Bugs switched on in the driver core (`--inject-bug`).
    pub driver_bugs: DriverBugs,
    /// `--inject-bug snapshot-log-decides`: a written background snapshot is recorded or
    /// dropped by the disk's own judgement, then reported to the node.
    pub snapshot_log_decides: bool,
}

/// How handling an input ended for the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drive {
    /// The node runs on.
    Running,
    /// The node crashed (a fault injected while handling its Ready).
    Crashed {
        /// Why, for the trace.
        reason: &'static str,
        /// What a crash between write and fsync left behind.
        torn: Option<TornWrite>,
    },
    /// The node broke the storage contract (e.g. entries with a gap).
    StorageContract(String),
}

/// One node's slot in the world: the node while it runs, and what outlives crashes.
pub struct NodeSlot {
    /// The node's id; never reused.
    pub id: NodeId,
    /// The node while it runs; `None` while crashed or after it was decommissioned.
    pub node: Option<Node>,
    /// The configuration it (re)starts with; only the seed changes between restarts.
    pub config: Config,
    /// Its disk, which survives crashes.
    pub disk: Disk,
    /// Fingerprint of its in-memory log.
    pub mirror: LogMirror,
    /// Bumped at every crash, so that stale tick and restart events are ignored.
    pub incarnation: u64,
    /// Tick period of its clock in true microseconds (10 ms × (1 + drift)).
    pub tick_period_us: u64,
    /// Paused: not ticked, and packets are held until it resumes.
    pub paused: bool,
    /// The process just exited (crashed or shut down): its kernel closes its connections,
    /// which the world tells the peers about (fast-election seeds), then clears this.
    pub exited: bool,
    /// Bumped at every pause, so that a stale resume event is ignored.
    pub pause_gen: u64,
    /// Packets that arrived while paused, in arrival order.
    pub held: VecDeque<(Addr, Packet)>,
    /// Ticks the node's clock would have made while paused; on resume they are delivered
    /// before the held packets, as a driver that ticks from a monotonic clock would.
    pub missed_ticks: u64,
    /// Replaying missed ticks after a pause: the node's clock lags true time until done, so
    /// what it believes in between is not observed as a belief about the present.
    pub catching_up: bool,
    /// Crash at the next Ready that writes, between write and fsync.
    pub crash_mid_ready: bool,
    /// Pipelined persistence (drawn per seed): a leader sends the AppendEntries of a Ready
    /// before its own fsync of the entries completes, and counts acknowledgements that
    /// arrive meanwhile (`Node::step_while_persisting`). The fsync completes at a
    /// `FsyncDone` event; until then the node handles only its clock's ticks and those
    /// acknowledgements, and holds its other inputs for after the fsync.
    pub pipelined: bool,
    /// A Ready written but not yet durable (pipelined persistence only).
    after_fsync: Option<AfterFsync>,
    /// The world must schedule the `FsyncDone` of the Ready just written.
    pub fsync_to_schedule: bool,
    /// A background snapshot being encoded and written (`Config::snapshot_in_background`):
    /// durable at a `SnapshotTaken` event; lost in a crash before.
    snapshot_taking: Option<(SnapshotImage, FileSnapshotWriter<MemFs>)>,
    /// A background snapshot written and reported by its thread, not yet handed to the node
    /// and the disk: as on the server, the next pass of the driver does that after handling
    /// its input and before its Ready (`NodeSlot::drive`), so a leader's snapshot stepped in the
    /// same pass crosses it. Lost in a crash.
    snapshot_written: Option<(tenure_core::types::Snapshot, WrittenSnapshot)>,
    /// The world must schedule the `SnapshotTaken` of the snapshot just handed out.
    pub snapshot_to_schedule: bool,
    /// The snapshot thread finished while the process was stopped: its report reaches the
    /// driver during its first pass after the resume, among the inputs that queued.
    pub snapshot_done_while_paused: bool,
    /// Removed from the cluster and shut down for good.
    pub decommissioned: bool,
    /// Has been a member of the cluster (so leaving the configuration means removal).
    pub was_member: bool,
    /// The node's status after its last step (`None` while down).
    pub status: Option<Status>,
    /// The bookkeeping between the node and its clients, shared with the server; `None`
    /// while the node is down.
    core: Option<DriverCore<ProposalFrom, KeepaliveFrom>>,
    watchers: BTreeMap<ClientId, String>,
    /// Keepalive streams open at this process (fate-sharing seeds), by id.
    pub streams: BTreeMap<u64, OpenStream>,
    /// Streams that ended here, oldest first (bounded by `ENDED_STREAMS_MAX`).
    ended_streams: VecDeque<u64>,
    commit_noted: Index,
    sm_applied_noted: Option<Index>,
    /// The local tick at which a held lease was last observed (once per tick is enough).
    lease_noted_tick: Option<u64>,
}

impl NodeSlot {
    /// A slot for a node that has not started yet.
    pub fn new(
        id: NodeId,
        config: Config,
        tick_period_us: u64,
        was_member: bool,
        disk: Disk,
    ) -> NodeSlot {
        NodeSlot {
            id,
            node: None,
            config,
            disk,
            mirror: LogMirror::default(),
            incarnation: 0,
            tick_period_us,
            paused: false,
            exited: false,
            pause_gen: 0,
            held: VecDeque::new(),
            missed_ticks: 0,
            catching_up: false,
            pipelined: false,
            after_fsync: None,
            fsync_to_schedule: false,
            snapshot_taking: None,
            snapshot_written: None,
            snapshot_to_schedule: false,
            snapshot_done_while_paused: false,
            crash_mid_ready: false,
            decommissioned: false,
            was_member,
            status: None,
            core: None,
            watchers: BTreeMap::new(),
            streams: BTreeMap::new(),
            ended_streams: VecDeque::new(),
            commit_noted: 0,
            sm_applied_noted: None,
            lease_noted_tick: None,
        }
    }

    /// True if the node runs (not crashed, not decommissioned); it may be paused.
    pub fn is_up(&self) -> bool {
        self.node.is_some()
    }

    /// The node's role, if up.
    pub fn role(&self) -> Option<Role> {
        self.status.as_ref().map(|s| s.role)
    }

    /// Starts (or restarts) the node from its disk with a fresh seed.
    pub fn start(&mut self, seed: u64, ctx: &mut DriveCtx<'_>) -> Result<Drive, String> {
        let recovered = self
            .disk
            .open()
            .map_err(|e| format!("node {} cannot open its write-ahead log: {e}", self.id))?;
        if let Some(repair) = self.disk.repaired() {
            ctx.trace.log(ctx.now_us, || {
                format!("node {} recovery: {repair}", self.id)
            });
        }
        let snapshot = recovered
            .snapshot
            .as_ref()
            .map(|s| (s.index, s.term, ctx.history.anchor(s.index)));
        self.mirror = LogMirror::recovered(snapshot, &recovered.entries);
        let mut config = self.config.clone();
        config.seed = seed;
        let node = in_core(|| Node::new(config, recovered))
            .map_err(|e| format!("node {} refused to start from its own disk: {e:?}", self.id))?;
        let status = in_core(|| node.status());
        self.commit_noted = status.commit;
        self.sm_applied_noted = None;
        self.status = None;
        self.core = Some(DriverCore::new(&status, ctx.now_us, ctx.driver_bugs));
        self.node = Some(node);
        self.paused = false;
        Ok(self.drive(ctx))
    }

    /// Crashes the node: unsynced writes are lost, and so is everything in memory.
    pub fn crash(&mut self) {
        self.node = None;
        self.status = None;
        self.disk.crash();
        self.held.clear();
        self.missed_ticks = 0;
        // Nothing a crashed process was waiting to answer is ever answered.
        self.core = None;
        self.watchers.clear();
        // A process's streams die with it (its clients see their connections reset).
        self.streams.clear();
        self.ended_streams.clear();
        self.paused = false;
        self.crash_mid_ready = false;
        self.after_fsync = None;
        self.fsync_to_schedule = false;
        // A snapshot being written when the process dies never reached the log.
        self.snapshot_taking = None;
        self.snapshot_written = None;
        self.snapshot_to_schedule = false;
        self.snapshot_done_while_paused = false;
        self.incarnation += 1;
        self.exited = true;
    }

    /// The transport's connection to `peer` closed (`refused: None`), or the reconnect made
    /// after it was refused (`Some(epoch)`: the node's follow epoch when the dial started).
    pub fn peer_closed(
        &mut self,
        peer: NodeId,
        refused: Option<u64>,
        ctx: &mut DriveCtx<'_>,
    ) -> Drive {
        let Some(node) = self.node.as_mut() else {
            return Drive::Running;
        };
        match refused {
            Some(epoch) => in_core(|| node.peer_reconnect_refused(peer, epoch)),
            None => in_core(|| node.peer_connection_closed(peer)),
        }
        self.drive(ctx)
    }

    /// The node's follow epoch (0 while it is down), as a dial is stamped with it.
    pub fn follow_epoch(&self) -> u64 {
        self.node.as_ref().map_or(0, Node::follow_epoch)
    }

    /// One tick of the node's clock.
    pub fn tick(&mut self, ctx: &mut DriveCtx<'_>) -> Drive {
        let Some(node) = self.node.as_mut() else {
            return Drive::Running;
        };
        in_core(|| node.tick());
        self.drive(ctx)
    }

    /// A packet arrives (the caller has dealt with pauses).
    pub fn receive(&mut self, from: Addr, packet: Packet, ctx: &mut DriveCtx<'_>) -> Drive {
        if self.node.is_none() {
            return Drive::Running;
        }
        self.step_input(from, packet, ctx);
        self.drive(ctx)
    }

    /// Packets that queued while the process was stopped, handled in one pass as the
    /// server's driver handles its batch: every input first, then a background snapshot its
    /// thread finished meanwhile, then the Ready.
    pub fn receive_batch(&mut self, packets: Vec<(Addr, Packet)>, ctx: &mut DriveCtx<'_>) -> Drive {
        if self.node.is_none() {
            return Drive::Running;
        }
        for (from, packet) in packets {
            self.step_input(from, packet, ctx);
        }
        self.drive(ctx)
    }

    /// Hands one packet to the node or the driver core, without handling the Ready.
    fn step_input(&mut self, from: Addr, packet: Packet, ctx: &mut DriveCtx<'_>) {
        let Some(node) = self.node.as_mut() else {
            return;
        };
        match (from, packet) {
            (_, Packet::Raft(message)) => {
                if let Err(e) = in_core(|| node.step(message)) {
                    // Refusing bad input with a typed error is the core's contract; nothing to
                    // check here, but it goes into the trace.
                    ctx.trace.log(ctx.now_us, || {
                        format!("node {} refused a message: {e:?}", self.id)
                    });
                }
            }
            (Addr::Client(client), Packet::Request(request)) => {
                self.client_request(client, request, ctx)
            }
            // Nodes never receive replies, and client requests only come from clients.
            _ => {}
        }
    }

    fn reply(&self, client: ClientId, reply: ClientReply, ctx: &mut DriveCtx<'_>) {
        ctx.out.push((
            Addr::Node(self.id),
            Addr::Client(client),
            Packet::Reply(reply),
        ));
    }

    fn set_watch(&mut self, client: ClientId, watch: Option<String>) {
        match watch {
            Some(election) => {
                self.watchers.insert(client, election);
            }
            None => {
                self.watchers.remove(&client);
            }
        }
    }

    fn client_request(&mut self, client: ClientId, request: ClientRequest, ctx: &mut DriveCtx<'_>) {
        let (Some(node), Some(core)) = (self.node.as_mut(), self.core.as_mut()) else {
            return;
        };
        match request {
            ClientRequest::Propose {
                req_id,
                request,
                command,
                watch,
            } => {
                let from = ProposalFrom { client, req_id };
                let proposed = in_core(|| core.propose(node, ctx.now_us, request, command, from));
                if let Some((index, term)) = proposed {
                    ctx.obs.push(Observation::Proposed {
                        node: self.id,
                        client,
                        req_id,
                        index,
                        term,
                    });
                }
                self.set_watch(client, watch);
            }
            ClientRequest::Keepalive {
                session,
                tag,
                watch,
                stream,
            } => {
                let bind = match stream {
                    Some(stream) if self.ended_streams.contains(&stream) => {
                        // The stream has ended here: TCP would deliver nothing more on it,
                        // and the client learns that it is gone.
                        self.reply(client, ClientReply::StreamEnded { stream }, ctx);
                        return;
                    }
                    Some(stream) => {
                        self.streams.entry(stream).or_insert(OpenStream {
                            client,
                            unresponsive_since_us: None,
                        });
                        Some(Bind { stream, seq: tag })
                    }
                    None => None,
                };
                let from = KeepaliveFrom { client, tag };
                in_core(|| core.keepalive_bound(node, ctx.now_us, session, None, bind, from));
                self.set_watch(client, watch);
            }
        }
    }

    /// The stream `stream` ended, as `end` says: the client closed it, or this server ended
    /// it (then its client is told). A stream this process never saw is remembered as ended
    /// all the same (a keepalive sent on it before the close may still be on its way).
    pub fn end_stream(&mut self, stream: u64, end: StreamEnd, ctx: &mut DriveCtx<'_>) -> Drive {
        let Some(node) = self.node.as_mut() else {
            return Drive::Running;
        };
        let open = self.streams.remove(&stream);
        if self.ended_streams.contains(&stream) {
            return Drive::Running;
        }
        if self.ended_streams.len() >= ENDED_STREAMS_MAX {
            self.ended_streams.pop_front();
        }
        self.ended_streams.push_back(stream);
        ctx.trace.log(ctx.now_us, || {
            format!("node {}: stream {stream:#x} ended by the {end:?}", self.id)
        });
        if let Some(core) = self.core.as_mut() {
            in_core(|| core.stream_ended(node, ctx.now_us, stream, end));
        }
        if let (StreamEnd::Server, Some(open)) = (end, open) {
            self.reply(open.client, ClientReply::StreamEnded { stream }, ctx);
        }
        self.drive(ctx)
    }

    /// Turns the driver core's answers into replies on the simulated network, exactly as
    /// the server turns them into gRPC statuses.
    fn deliver(&mut self, ctx: &mut DriveCtx<'_>) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let out = core.drain();
        for a in out.answers {
            let ProposalFrom { client, req_id } = a.reply;
            let reply = match &a.outcome {
                Outcome::Applied { index, response } => ClientReply::Applied {
                    req_id,
                    index: *index,
                    response: response.clone(),
                },
                Outcome::Failed(Failure::Superseded { .. }) => ClientReply::Retry { req_id },
                Outcome::Failed(Failure::Refused(ProposeError::NotLeader { leader_hint })) => {
                    ClientReply::NotLeader {
                        req_id,
                        hint: *leader_hint,
                    }
                }
                Outcome::Failed(Failure::Refused(ProposeError::UnknownSession(session))) => {
                    ClientReply::SessionUnknown {
                        req_id,
                        session: *session,
                    }
                }
                Outcome::Failed(Failure::Refused(_)) => ClientReply::Busy { req_id },
                Outcome::Indeterminate(_) => ClientReply::Indeterminate { req_id },
            };
            // Refusals before the log are not answers to an appended proposal.
            if !matches!(a.outcome, Outcome::Failed(Failure::Refused(_))) {
                ctx.obs.push(Observation::Answered {
                    node: self.id,
                    client,
                    req_id,
                    definite_failure: matches!(a.outcome, Outcome::Failed(_)),
                    what: match a.outcome {
                        Outcome::Applied { .. } => "applied",
                        Outcome::Failed(Failure::Superseded { .. }) => "superseded (lost)",
                        Outcome::Failed(Failure::Refused(_)) => "refused",
                        Outcome::Indeterminate(_) => "indeterminate",
                    },
                });
            }
            self.reply(client, reply, ctx);
        }
        for k in out.keepalives {
            let KeepaliveFrom { client, tag } = k.reply;
            let reply = match k.outcome {
                KeepaliveOutcome::Acked { ttl_ticks } => ClientReply::KeepaliveAck {
                    tag,
                    session: k.session,
                    ttl_ticks,
                },
                KeepaliveOutcome::Refused(ProposeError::NotLeader { leader_hint }) => {
                    ClientReply::KeepaliveRefused {
                        tag,
                        session: k.session,
                        unknown_session: false,
                        hint: leader_hint,
                    }
                }
                KeepaliveOutcome::Refused(ProposeError::UnknownSession(_)) => {
                    ClientReply::KeepaliveRefused {
                        tag,
                        session: k.session,
                        unknown_session: true,
                        hint: None,
                    }
                }
                // A transient refusal: the client's next keepalive retries.
                KeepaliveOutcome::Refused(_) => continue,
            };
            self.reply(client, reply, ctx);
        }
        // Events feed the server's metrics; the trace already records roles and terms.
        ctx.stats.leaders_gone += out
            .events
            .iter()
            .filter(|e| matches!(e, Event::Core(NodeEvent::LeaderGone { .. })))
            .count() as u64;
    }

    /// Records entries newly covered by the node's commit index.
    fn note_commit(&mut self, commit: Index, ctx: &mut DriveCtx<'_>) {
        if commit <= self.commit_noted {
            return;
        }
        let mut entries = Vec::new();
        for index in (self.commit_noted + 1)..=commit {
            if let Lookup::Entry(e) = self.mirror.get(index) {
                entries.push(e);
            }
        }
        ctx.trace.detail(ctx.now_us, || {
            format!("node {} commit {} -> {commit}", self.id, self.commit_noted)
        });
        self.commit_noted = commit;
        if !entries.is_empty() {
            ctx.history.record_committed(&entries);
            ctx.stats.committed_index = ctx.stats.committed_index.max(commit);
            ctx.obs.push(Observation::Committed {
                node: self.id,
                entries,
            });
        }
    }

    /// Handles Ready until there is none, then records the node's new status. A background
    /// snapshot written since the last pass is finished first, after the input that led here
    /// and before its Ready, in the server driver's order.
    pub fn drive(&mut self, ctx: &mut DriveCtx<'_>) -> Drive {
        // Not while a Ready awaits its fsync (pipelined persistence): the node takes no input
        // until it is advanced, and the pass after the fsync finishes the snapshot.
        if !self.persisting() {
            if let Drive::StorageContract(why) = self.finish_snapshot(ctx) {
                return Drive::StorageContract(why);
            }
        }
        loop {
            let Some(node) = self.node.as_mut() else {
                return Drive::Running;
            };
            if !in_core(|| node.has_ready()) {
                break;
            }
            let ready = in_core(|| node.ready());
            match self.handle_ready(ready, ctx) {
                Drive::Running => {}
                other => return other,
            }
        }
        if let (Some(node), Some(core)) = (self.node.as_ref(), self.core.as_mut()) {
            in_core(|| core.observe(node, ctx.now_us));
        }
        self.deliver(ctx);
        self.after_step(ctx);
        Drive::Running
    }

    fn handle_ready(&mut self, mut ready: Ready, ctx: &mut DriveCtx<'_>) -> Drive {
        // In pipelined seeds a leader's AppendEntries may leave before its fsync.
        let early = match self.node.as_ref() {
            Some(node) if self.pipelined => in_core(|| node.early_appends(&mut ready)),
            _ => None,
        };
        let Ready {
            hard_state,
            must_sync,
            snapshot,
            entries,
            snapshot_image,
            messages,
            applied,
            leader_changes,
            keepalive_acks,
            reads,
            applied_through,
            // The simulator judges behaviour with its checkers, not the core's own account;
            // the driver core turns it into the events a server counts and logs.
            events,
        } = ready;
        ctx.trace.event(
            TraceKind::Ready,
            ctx.now_us,
            &[
                self.id,
                entries.len() as u64,
                messages.len() as u64,
                applied.len() as u64,
            ],
        );
        if let Some(s) = &snapshot {
            self.before_mirror_compacts(s.index, s.term, ctx);
        }
        if let Some(image) = snapshot_image {
            ctx.trace.log(ctx.now_us, || {
                format!(
                    "node {} starts a background snapshot at {}",
                    self.id,
                    image.index()
                )
            });
            // As the server's driver does: the file number is reserved now, the file written
            // by the snapshot thread (the `SnapshotTaken` event).
            let writer = self.disk.snapshot_writer();
            self.snapshot_taking = Some((image, writer));
            self.snapshot_to_schedule = true;
        }
        let writes = hard_state.is_some() || snapshot.is_some() || !entries.is_empty();
        if writes && self.crash_mid_ready {
            if let Err(e) = self
                .disk
                .write(snapshot.as_ref(), &entries, hard_state.as_ref())
            {
                return Drive::StorageContract(format!("node {}: {e}", self.id));
            }
            return self.crash_before_fsync("between write and fsync", ctx);
        }

        // 1. Persist and fsync.
        if let Some(s) = &snapshot {
            self.mirror
                .install_snapshot(s.index, s.term, ctx.history.anchor(s.index));
        }
        if !entries.is_empty() {
            ctx.trace.detail(ctx.now_us, || {
                let terms: Vec<(u64, u64)> = entries.iter().map(|e| (e.index, e.term)).collect();
                format!("node {} appends {terms:?}", self.id)
            });
            let appended = self.mirror.append(&entries);
            ctx.obs.push(Observation::Appended {
                node: self.id,
                entries: appended,
            });
        }
        let snapshot_index = snapshot.as_ref().map(|s| s.index);
        if let Err(e) = self
            .disk
            .write(snapshot.as_ref(), &entries, hard_state.as_ref())
        {
            return Drive::StorageContract(format!("node {}: {e}", self.id));
        }
        let rest = AfterFsync {
            messages,
            snapshot_index,
            applied_through,
            applied,
            leader_changes,
            keepalive_acks,
            reads,
            events,
        };
        if let Some(early) = early {
            // Replicate while the fsync runs: this leader's AppendEntries leave now, the
            // rest when the entries are durable.
            self.send(early, ctx);
            self.after_fsync = Some(rest);
            self.fsync_to_schedule = true;
            return Drive::Running;
        }
        // A commit index alone is written, not fsynced (`Ready::must_sync`): a crash before
        // the next fsync loses it, as a real disk's page cache would.
        if must_sync {
            if let Err(e) = self.disk.fsync() {
                return Drive::StorageContract(format!("node {}: {e}", self.id));
            }
        }
        self.finish_ready(rest, ctx)
    }

    /// A snapshot is about to replace the mirror's log up to `index`. If it is a local
    /// compaction, record what this node committed before the mirror drops it. (The mirror
    /// still shows the log as of the previous Ready; if it does not hold the snapshot's last
    /// entry, the snapshot came from the leader and replaces a log that may conflict with
    /// it, so nothing of it is recorded.)
    fn before_mirror_compacts(&mut self, index: Index, term: Term, ctx: &mut DriveCtx<'_>) {
        if matches!(self.mirror.get(index), Lookup::Entry(e) if e.term == term) {
            let commit = self
                .node
                .as_ref()
                .map_or(0, |n| in_core(|| n.status().commit));
            self.note_commit(commit.min(index), ctx);
        }
        self.commit_noted = self.commit_noted.max(index);
    }

    /// The background snapshot is encoded and durable: its thread reports it, and the next
    /// pass of the driver ([`NodeSlot::drive`], after that pass's input) hands it to the node and
    /// the disk. Returns its index, for the wake-up the thread sends.
    pub fn snapshot_written(&mut self) -> Option<Index> {
        if let Some((image, writer)) = self.snapshot_taking.take() {
            let snapshot = image.encode();
            // The in-memory file system does not fail, and a simulated snapshot is far
            // below the log's size limit.
            let written = writer
                .write(&snapshot)
                .expect("a simulated snapshot file is written");
            self.snapshot_written = Some((snapshot, written));
        }
        self.snapshot_waiting()
    }

    /// The index of a written background snapshot that waits for the driver's next pass.
    pub fn snapshot_waiting(&self) -> Option<Index> {
        self.snapshot_written.as_ref().map(|(s, _)| s.index)
    }

    /// As the server's driver does, with its function: the node decides whether the written
    /// snapshot is still current, and the disk records it or discards it accordingly.
    fn finish_snapshot(&mut self, ctx: &mut DriveCtx<'_>) -> Drive {
        let Some((snapshot, written)) = self.snapshot_written.take() else {
            return Drive::Running;
        };
        let Some(node) = self.node.as_mut() else {
            return Drive::Running;
        };
        let (index, term) = (snapshot.index, snapshot.term);
        let finished = if ctx.snapshot_log_decides {
            Self::finish_as_the_log_decides(node, &mut self.disk, snapshot, written)
        } else {
            in_core(|| {
                tenure_driver::finish_background_snapshot(node, &mut self.disk, snapshot, written)
            })
            .map_err(|e| format!("finishing its background snapshot at {index}: {e}"))
        };
        let adopted = match finished {
            Ok(adopted) => adopted,
            Err(why) => return Drive::StorageContract(format!("node {}: {why}", self.id)),
        };
        ctx.trace.log(ctx.now_us, || {
            format!(
                "node {} took its background snapshot at {index}: {}",
                self.id,
                if adopted {
                    "recorded and adopted"
                } else {
                    "superseded by an installed snapshot"
                }
            )
        });
        if adopted {
            self.before_mirror_compacts(index, term, ctx);
            self.mirror
                .install_snapshot(index, term, ctx.history.anchor(index));
        }
        Drive::Running
    }

    /// `--inject-bug snapshot-log-decides`: the server driver's order before the fix. The
    /// disk records the snapshot if it is past the snapshot the disk holds, the node is told
    /// after, and a disagreement is what killed the server's driver thread.
    fn finish_as_the_log_decides(
        node: &mut Node,
        disk: &mut Disk,
        snapshot: tenure_core::types::Snapshot,
        written: WrittenSnapshot,
    ) -> Result<bool, String> {
        let index = snapshot.index;
        let recorded = index > disk.stored_snapshot_index();
        let stored = if recorded {
            disk.record_snapshot(written)
        } else {
            disk.discard_snapshot(written)
        };
        stored.map_err(|e| e.to_string())?;
        let adopted = in_core(|| node.snapshot_taken(Some(snapshot)));
        if recorded != adopted {
            return Err(format!(
                "the disk {} the snapshot at {index} but the node {} it",
                if recorded { "recorded" } else { "dropped" },
                if adopted { "adopted" } else { "dropped" },
            ));
        }
        Ok(adopted)
    }

    /// Whether a Ready's fsync is still running (pipelined persistence).
    pub fn persisting(&self) -> bool {
        self.after_fsync.is_some()
    }

    /// A packet arrives while the fsync runs: a leader's acknowledgements are counted now
    /// (and the AppendEntries they prompt leave now); anything else is handed back to be held
    /// until the fsync is done.
    pub fn receive_while_persisting(
        &mut self,
        from: Addr,
        packet: Packet,
        ctx: &mut DriveCtx<'_>,
    ) -> Option<(Addr, Packet)> {
        let node = self.node.as_mut()?;
        let Packet::Raft(message) = &packet else {
            return Some((from, packet));
        };
        match in_core(|| node.step_while_persisting(message.clone())) {
            Ok(true) => {}
            Ok(false) => return Some((from, packet)),
            Err(e) => {
                ctx.trace.log(ctx.now_us, || {
                    format!("node {} refused a message: {e:?}", self.id)
                });
                return None;
            }
        }
        let early = in_core(|| node.take_early_appends());
        self.send(early, ctx);
        self.after_step(ctx);
        None
    }

    /// One tick of the node's clock while the fsync runs.
    pub fn tick_while_persisting(&mut self, ctx: &mut DriveCtx<'_>) {
        let Some(node) = self.node.as_mut() else {
            return;
        };
        in_core(|| node.tick_while_persisting());
        let early = in_core(|| node.take_early_appends());
        self.send(early, ctx);
        self.after_step(ctx);
    }

    /// Crash with the last write not yet fsynced: the disk keeps a torn prefix of it.
    fn crash_before_fsync(&mut self, reason: &'static str, ctx: &mut DriveCtx<'_>) -> Drive {
        let torn = self.disk.crash_torn(ctx.rng);
        self.crash();
        Drive::Crashed {
            reason,
            torn: Some(torn),
        }
    }

    /// The fsync of the Ready written last completes, or the node crashes first (`crash`),
    /// losing what the fsync would have made durable although followers may hold it.
    pub fn fsync_done(&mut self, crash: bool, ctx: &mut DriveCtx<'_>) -> Drive {
        let Some(rest) = self.after_fsync.take() else {
            return Drive::Running;
        };
        if crash {
            return self.crash_before_fsync(
                "between append and fsync, with the entries already replicated",
                ctx,
            );
        }
        if let Err(e) = self.disk.fsync() {
            return Drive::StorageContract(format!("node {}: {e}", self.id));
        }
        match self.finish_ready(rest, ctx) {
            Drive::Running => self.drive(ctx),
            other => other,
        }
    }

    fn send(&mut self, messages: Vec<tenure_core::message::Message>, ctx: &mut DriveCtx<'_>) {
        for message in messages {
            let to = message.to;
            ctx.out
                .push((Addr::Node(self.id), Addr::Node(to), Packet::Raft(message)));
        }
    }

    /// Steps 2 to 4 of a Ready whose writes are durable.
    fn finish_ready(&mut self, rest: AfterFsync, ctx: &mut DriveCtx<'_>) -> Drive {
        // 2. Tell the node its Ready is durable.
        let Some(node) = self.node.as_mut() else {
            return Drive::Running;
        };
        in_core(|| node.advance());

        // 3. Send.
        let mut granted_vote = false;
        for message in &rest.messages {
            if matches!(message.body, Body::RequestVoteResponse { granted: true }) {
                granted_vote = true;
                ctx.obs.push(Observation::VoteGranted {
                    voter: self.id,
                    candidate: message.to,
                    term: message.term,
                });
            }
        }
        self.send(rest.messages, ctx);

        // 4. Answer clients: the driver core decides, `deliver` sends.
        if let (Some(node), Some(core)) = (self.node.as_ref(), self.core.as_mut()) {
            let parts = ReadyParts {
                snapshot_index: rest.snapshot_index,
                applied_through: rest.applied_through,
                applied: &rest.applied,
                leader_changes: rest.leader_changes.len(),
                keepalive_acks: &rest.keepalive_acks,
                reads: &rest.reads,
                events: &rest.events,
            };
            in_core(|| core.on_ready_parts(node, ctx.now_us, parts));
        }
        self.deliver(ctx);
        for change in &rest.leader_changes {
            let watchers: Vec<ClientId> = self
                .watchers
                .iter()
                .filter(|(_, e)| **e == change.election)
                .map(|(c, _)| *c)
                .collect();
            for client in watchers {
                self.reply(client, ClientReply::LeaderChanged(change.clone()), ctx);
            }
        }
        if !rest.applied.is_empty() || !rest.leader_changes.is_empty() {
            ctx.obs.push(Observation::Applied {
                node: self.id,
                applied: rest.applied,
                leader_changes: rest.leader_changes,
            });
        }

        if granted_vote && ctx.rng.chance(ctx.crash_after_vote) {
            self.crash();
            return Drive::Crashed {
                reason: "right after granting a vote",
                torn: None,
            };
        }
        Drive::Running
    }

    /// Records role, term, commit and state machine changes after a step, and runs the
    /// node's own invariant checks.
    fn after_step(&mut self, ctx: &mut DriveCtx<'_>) {
        let Some(node) = self.node.as_ref() else {
            return;
        };
        let before = self.status.as_ref().map(|s| (s.role, s.term));
        // One `Status` per node, refreshed in place: the membership is cloned only when it
        // changed.
        let status = match &mut self.status {
            Some(status) => {
                in_core(|| node.refresh_status(status));
                status
            }
            None => self.status.insert(in_core(|| node.status())),
        };
        let (role, term, commit) = (status.role, status.term, status.commit);
        let lease_held = status.lease_until_tick.is_some_and(|u| u > status.now_tick);
        let now_tick = status.now_tick;
        self.note_commit(commit, ctx);
        let Some(node) = self.node.as_ref() else {
            return;
        };
        if before != Some((role, term)) {
            ctx.trace.event(
                TraceKind::Role,
                ctx.now_us,
                &[self.id, role_code(role), term],
            );
            ctx.trace.log(ctx.now_us, || {
                format!("node {} is {:?} in term {}", self.id, role, term)
            });
            ctx.stats.max_term = ctx.stats.max_term.max(term);
            if role == Role::Leader {
                ctx.stats.raft_leaders_elected += 1;
            }
            ctx.obs.push(Observation::Role {
                node: self.id,
                role,
                term,
            });
        }
        if role == Role::Leader
            && !self.catching_up
            && lease_held
            && self.lease_noted_tick != Some(now_tick)
        {
            self.lease_noted_tick = Some(now_tick);
            ctx.obs.push(Observation::LeaseHeld {
                node: self.id,
                term,
            });
        }
        let sm = in_core(|| node.state_machine());
        let applied_index = in_core(|| sm.applied_index());
        if self.sm_applied_noted != Some(applied_index) {
            self.sm_applied_noted = Some(applied_index);
            let digest = in_core(|| sm.digest());
            ctx.obs.push(Observation::Digest {
                node: self.id,
                applied_index,
                digest,
            });
        }
        in_core(|| node.check_invariants());
    }

    /// Index of the node's latest membership entry still in its log, if any.
    pub fn latest_membership_index(&self) -> Option<Index> {
        self.mirror
            .entries()
            .iter()
            .rev()
            .find(|e| e.kind == EntryKind::Membership)
            .map(|e| e.index)
    }

    /// Whether the node's current membership is committed (its latest membership entry, if
    /// still in the log, is at or below its commit index).
    pub fn membership_committed(&self) -> bool {
        match (&self.status, self.latest_membership_index()) {
            (Some(s), Some(index)) => index <= s.commit && !s.membership.is_joint(),
            (Some(s), None) => !s.membership.is_joint(),
            (None, _) => false,
        }
    }

    /// The node itself, for the world's leader-side operations; `None` while it blocks in a
    /// pipelined fsync (it takes no input then).
    pub fn node_mut(&mut self) -> Option<&mut Node> {
        if self.after_fsync.is_some() {
            return None;
        }
        self.node.as_mut()
    }
}

/// A number for each role, for the trace hash.
pub fn role_code(role: Role) -> u64 {
    match role {
        Role::Follower => 1,
        Role::PreCandidate => 2,
        Role::Candidate => 3,
        Role::Leader => 4,
    }
}
