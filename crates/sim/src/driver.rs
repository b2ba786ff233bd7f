//! The per-node driver: owns a node's [`Pipeline`] (the node and its driver core), its
//! simulated disk and its log mirror. Each Ready goes through the pipeline the server's
//! driver thread runs, [`tenure_driver::Pipeline`]: written, a leader's AppendEntries sent
//! early (pipelined seeds), synced (at once, or at a scheduled `FsyncDone` in pipelined
//! seeds, or never because of a crash), advanced, the rest sent, and the answers decided by
//! the same [`tenure_driver::DriverCore`] real clients get theirs from. What this file adds
//! is the world around it: the fault points, the log mirror and the observations the
//! checkers judge.
//!
//! Ready is taken again until there is none. A crash between the write and its fsync loses
//! (or tears) the write; the Ready's later messages are never sent.

use std::collections::{BTreeMap, VecDeque};

use tenure_core::config::Config;
use tenure_core::event::NodeEvent;
use tenure_core::message::Body;
use tenure_core::message::Message;
use tenure_core::node::{
    Bind, Node, Persist, ProposeError, Role, SnapshotImage, Status, StreamEnd,
};
use tenure_core::types::{Index, NodeId, Term};
use tenure_driver::{DriverBugs, Event, Failure, Finished, KeepaliveOutcome, Outcome, Pipeline};

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
    /// Bugs switched on in the core (`--inject-bug`), for the nodes it starts.
    pub core_bugs: crate::CoreBugs,
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
    /// The node and its driver core while it runs (the bookkeeping between the node and its
    /// clients, shared with the server); `None` while crashed or after it was
    /// decommissioned.
    pipeline: Option<Pipeline<ProposalFrom, KeepaliveFrom>>,
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
    /// True time of its clock's latest tick (counting those it missed while paused; for
    /// tick 0 of a start, one period before the first tick), so that a local tick can be
    /// turned into the true time at which the clock reaches it.
    pub last_tick_us: SimTimeUs,
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
    /// Its term when its process last exited: replies it sent before it crashed may leave
    /// after (a scenario can crash a node between its step and the world's flush).
    pub exit_term: tenure_core::types::Term,
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
            pipeline: None,
            config,
            disk,
            mirror: LogMirror::default(),
            incarnation: 0,
            tick_period_us,
            last_tick_us: 0,
            paused: false,
            exited: false,
            pause_gen: 0,
            held: VecDeque::new(),
            missed_ticks: 0,
            catching_up: false,
            pipelined: false,
            fsync_to_schedule: false,
            snapshot_taking: None,
            snapshot_written: None,
            snapshot_to_schedule: false,
            snapshot_done_while_paused: false,
            crash_mid_ready: false,
            decommissioned: false,
            was_member,
            status: None,
            exit_term: 0,
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
        self.pipeline.is_some()
    }

    /// The node, while it runs.
    pub fn node(&self) -> Option<&Node> {
        self.pipeline.as_ref().map(Pipeline::node)
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
        let node = in_core(|| crate::new_node(config, recovered, ctx.core_bugs))
            .map_err(|e| format!("node {} refused to start from its own disk: {e:?}", self.id))?;
        let status = in_core(|| node.status());
        self.commit_noted = status.commit;
        self.sm_applied_noted = None;
        self.status = None;
        self.pipeline = Some(in_core(|| {
            Pipeline::new(node, ctx.now_us, self.pipelined, ctx.driver_bugs)
        }));
        // Rebuilt from the recovered state machine, every session's deadline must still
        // cover what other leaders promised.
        ctx.obs.push(Observation::DeadlinesReset { node: self.id });
        self.paused = false;
        Ok(self.drive(ctx))
    }

    /// Crashes the node: unsynced writes are lost, and so is everything in memory.
    pub fn crash(&mut self) {
        // Nothing a crashed process was waiting to answer is ever answered.
        self.pipeline = None;
        if let Some(status) = self.status.take() {
            self.exit_term = status.term;
        }
        self.disk.crash();
        self.held.clear();
        self.missed_ticks = 0;
        self.watchers.clear();
        // A process's streams die with it (its clients see their connections reset).
        self.streams.clear();
        self.ended_streams.clear();
        self.paused = false;
        self.crash_mid_ready = false;
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
        let Some(node) = self.pipeline.as_mut().map(Pipeline::node_mut) else {
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
        self.node().map_or(0, Node::follow_epoch)
    }

    /// One tick of the node's clock.
    pub fn tick(&mut self, ctx: &mut DriveCtx<'_>) -> Drive {
        let Some(node) = self.pipeline.as_mut().map(Pipeline::node_mut) else {
            return Drive::Running;
        };
        in_core(|| node.tick());
        self.drive(ctx)
    }

    /// A packet arrives (the caller has dealt with pauses).
    pub fn receive(&mut self, from: Addr, packet: Packet, ctx: &mut DriveCtx<'_>) -> Drive {
        if !self.is_up() {
            return Drive::Running;
        }
        self.step_input(from, packet, ctx);
        self.drive(ctx)
    }

    /// Packets that queued while the process was stopped, handled in one pass as the
    /// server's driver handles its batch: every input first, then a background snapshot its
    /// thread finished meanwhile, then the Ready.
    pub fn receive_batch(&mut self, packets: Vec<(Addr, Packet)>, ctx: &mut DriveCtx<'_>) -> Drive {
        if !self.is_up() {
            return Drive::Running;
        }
        for (from, packet) in packets {
            self.step_input(from, packet, ctx);
        }
        self.drive(ctx)
    }

    /// Hands one packet to the node or the driver core, without handling the Ready.
    fn step_input(&mut self, from: Addr, packet: Packet, ctx: &mut DriveCtx<'_>) {
        let Some(node) = self.pipeline.as_mut().map(Pipeline::node_mut) else {
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
        let Some((node, core)) = self.pipeline.as_mut().map(Pipeline::parts) else {
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
        if !self.is_up() {
            return Drive::Running;
        }
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
        if let Some((node, core)) = self.pipeline.as_mut().map(Pipeline::parts) {
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
        let Some(pipeline) = self.pipeline.as_mut() else {
            return;
        };
        let out = pipeline.drain();
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
        note_commit(self.id, &self.mirror, &mut self.commit_noted, commit, ctx);
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
        while !self.persisting() {
            match self.handle_ready(ctx) {
                None => break,
                Some(Drive::Running) => {}
                Some(other) => return other,
            }
        }
        if let Some(pipeline) = self.pipeline.as_mut() {
            in_core(|| pipeline.observe(ctx.now_us));
        }
        self.deliver(ctx);
        self.after_step(ctx);
        Drive::Running
    }

    /// One Ready through the shared pipeline: written (the mirror and the checkers see it
    /// first); then, unless a fault intervenes, synced and finished — or, when a leader's
    /// AppendEntries left ahead of the fsync (pipelined seeds), left to a later `FsyncDone`.
    /// `None` when the node has no Ready (or is down).
    fn handle_ready(&mut self, ctx: &mut DriveCtx<'_>) -> Option<Drive> {
        // The mirror and the commit mark leave the slot while the closure below records into
        // them; the pipeline and the disk are borrowed in place.
        let mut mirror = std::mem::take(&mut self.mirror);
        let mut commit_noted = self.commit_noted;
        let mut sent = Vec::new();
        let mut writes = false;
        let id = self.id;
        let wrote = match self.pipeline.as_mut() {
            None => Ok(None),
            Some(pipeline) => in_core(|| {
                pipeline.write(&mut self.disk, &mut |m| sent.push(m), |node, persist| {
                    writes = !persist.is_empty();
                    record_write(id, &mut mirror, &mut commit_noted, node, persist, ctx);
                })
            }),
        };
        self.mirror = mirror;
        self.commit_noted = commit_noted;
        let wrote = match wrote {
            Ok(Some(wrote)) => wrote,
            Ok(None) => return None,
            Err(e) => return Some(Drive::StorageContract(format!("node {}: {e}", self.id))),
        };
        self.send(sent, ctx);
        if writes && self.crash_mid_ready {
            return Some(self.crash_before_fsync("between write and fsync", ctx));
        }
        if wrote.replicating {
            // Replicate while the fsync runs: this leader's AppendEntries left now, the rest
            // leave when the entries are durable.
            self.fsync_to_schedule = true;
            return Some(Drive::Running);
        }
        // A commit index alone is written, not fsynced (`Persist::must_sync`): a crash before
        // the next fsync loses it, as a real disk's page cache would.
        Some(self.sync_and_finish(ctx))
    }

    /// The written Ready's fsync, then the rest of it.
    fn sync_and_finish(&mut self, ctx: &mut DriveCtx<'_>) -> Drive {
        let Some(pipeline) = self.pipeline.as_mut() else {
            return Drive::Running;
        };
        if let Err(e) = in_core(|| pipeline.sync(&mut self.disk)) {
            return Drive::StorageContract(format!("node {}: {e}", self.id));
        }
        self.finish_ready(ctx)
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
        let Some(pipeline) = self.pipeline.as_mut() else {
            return Drive::Running;
        };
        let (index, term) = (snapshot.index, snapshot.term);
        let finished = if ctx.snapshot_log_decides {
            let node = pipeline.node_mut();
            Self::finish_as_the_log_decides(node, &mut self.disk, snapshot, written)
        } else {
            in_core(|| pipeline.finish_snapshot(&mut self.disk, snapshot, written, ctx.now_us))
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
            let commit = self.node().map_or(0, |n| in_core(|| n.status().commit));
            before_mirror_compacts(
                self.id,
                &self.mirror,
                &mut self.commit_noted,
                (index, term),
                commit,
                ctx,
            );
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
        self.pipeline.as_ref().is_some_and(Pipeline::syncing)
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
        let pipeline = self.pipeline.as_mut()?;
        let Packet::Raft(message) = &packet else {
            return Some((from, packet));
        };
        let mut sent = Vec::new();
        match in_core(|| pipeline.step_while_syncing(message.clone(), &mut |m| sent.push(m))) {
            Ok(true) => {}
            Ok(false) => return Some((from, packet)),
            Err(e) => {
                ctx.trace.log(ctx.now_us, || {
                    format!("node {} refused a message: {e:?}", self.id)
                });
                return None;
            }
        }
        self.send(sent, ctx);
        self.after_step(ctx);
        None
    }

    /// One tick of the node's clock while the fsync runs.
    pub fn tick_while_persisting(&mut self, ctx: &mut DriveCtx<'_>) {
        let Some(pipeline) = self.pipeline.as_mut() else {
            return;
        };
        let mut sent = Vec::new();
        in_core(|| pipeline.tick_while_syncing(&mut |m| sent.push(m)));
        self.send(sent, ctx);
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
        if !self.persisting() {
            return Drive::Running;
        }
        if crash {
            return self.crash_before_fsync(
                "between append and fsync, with the entries already replicated",
                ctx,
            );
        }
        match self.sync_and_finish(ctx) {
            Drive::Running => self.drive(ctx),
            other => other,
        }
    }

    fn send(&mut self, messages: Vec<Message>, ctx: &mut DriveCtx<'_>) {
        for message in messages {
            let to = message.to;
            ctx.out
                .push((Addr::Node(self.id), Addr::Node(to), Packet::Raft(message)));
        }
    }

    /// Steps 2 to 4 of a Ready whose writes are durable: the pipeline advances the node,
    /// sends the rest and decides the answers; `deliver` sends those, watchers hear of
    /// leader changes, and a background snapshot the Ready asked for starts.
    fn finish_ready(&mut self, ctx: &mut DriveCtx<'_>) -> Drive {
        let Some(pipeline) = self.pipeline.as_mut() else {
            return Drive::Running;
        };
        let mut sent = Vec::new();
        let finished = in_core(|| pipeline.advance(ctx.now_us, &mut |m| sent.push(m)));
        let mut granted_vote = false;
        for message in &sent {
            if matches!(message.body, Body::RequestVoteResponse { granted: true }) {
                granted_vote = true;
                ctx.obs.push(Observation::VoteGranted {
                    voter: self.id,
                    candidate: message.to,
                    term: message.term,
                });
            }
        }
        self.send(sent, ctx);
        self.deliver(ctx);
        let Finished {
            snapshot_persisted,
            snapshot_image,
            leader_changes,
            applied,
        } = finished;
        for change in &leader_changes {
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
        if !applied.is_empty() || !leader_changes.is_empty() {
            ctx.obs.push(Observation::Applied {
                node: self.id,
                applied,
                leader_changes,
            });
        }
        if snapshot_persisted.is_some() {
            // A snapshot from the leader rebuilt every session's deadline (a local compaction
            // lands here too, which rebuilds nothing: checking it costs only time).
            ctx.obs.push(Observation::DeadlinesReset { node: self.id });
        }
        if let Some(image) = snapshot_image {
            self.start_snapshot(image, ctx);
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

    /// As the server's driver does: the file number is reserved now, the file written by
    /// the snapshot thread (the `SnapshotTaken` event).
    fn start_snapshot(&mut self, image: SnapshotImage, ctx: &mut DriveCtx<'_>) {
        ctx.trace.log(ctx.now_us, || {
            format!(
                "node {} starts a background snapshot at {}",
                self.id,
                image.index()
            )
        });
        let writer = self.disk.snapshot_writer();
        self.snapshot_taking = Some((image, writer));
        self.snapshot_to_schedule = true;
    }

    /// Records role, term, commit and state machine changes after a step, and runs the
    /// node's own invariant checks.
    fn after_step(&mut self, ctx: &mut DriveCtx<'_>) {
        let Some(node) = self.pipeline.as_ref().map(Pipeline::node) else {
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
        let Some(node) = self.pipeline.as_ref().map(Pipeline::node) else {
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
        if self.persisting() {
            return None;
        }
        self.pipeline.as_mut().map(Pipeline::node_mut)
    }
}

/// What the checkers and node `id`'s log mirror learn of a Ready's write, before it
/// happens.
fn record_write(
    id: NodeId,
    mirror: &mut LogMirror,
    commit_noted: &mut Index,
    node: &Node,
    persist: &Persist,
    ctx: &mut DriveCtx<'_>,
) {
    ctx.trace.event(
        TraceKind::Ready,
        ctx.now_us,
        &[id, persist.entries.len() as u64],
    );
    if let Some(s) = &persist.snapshot {
        let commit = in_core(|| node.status().commit);
        before_mirror_compacts(id, mirror, commit_noted, (s.index, s.term), commit, ctx);
        mirror.install_snapshot(s.index, s.term, ctx.history.anchor(s.index));
    }
    if !persist.entries.is_empty() {
        ctx.trace.detail(ctx.now_us, || {
            let terms: Vec<(u64, u64)> =
                persist.entries.iter().map(|e| (e.index, e.term)).collect();
            format!("node {id} appends {terms:?}")
        });
        let appended = mirror.append(&persist.entries);
        ctx.obs.push(Observation::Appended {
            node: id,
            entries: appended,
        });
    }
}

/// A snapshot at `(index, term)` is about to replace the mirror's log up to `index`. If it is
/// a local compaction, record what node `id` committed (`commit`) before the mirror drops it.
/// (The mirror still shows the log as of the previous Ready; if it does not hold the
/// snapshot's last entry, the snapshot came from the leader and replaces a log that may
/// conflict with it, so nothing of it is recorded.)
fn before_mirror_compacts(
    id: NodeId,
    mirror: &LogMirror,
    commit_noted: &mut Index,
    (index, term): (Index, Term),
    commit: Index,
    ctx: &mut DriveCtx<'_>,
) {
    if matches!(mirror.get(index), Lookup::Entry(e) if e.term == term) {
        note_commit(id, mirror, commit_noted, commit.min(index), ctx);
    }
    *commit_noted = (*commit_noted).max(index);
}

/// Records the entries of node `id`'s log newly covered by its commit index.
fn note_commit(
    id: NodeId,
    mirror: &LogMirror,
    commit_noted: &mut Index,
    commit: Index,
    ctx: &mut DriveCtx<'_>,
) {
    if commit <= *commit_noted {
        return;
    }
    let mut entries = Vec::new();
    for index in (*commit_noted + 1)..=commit {
        if let Lookup::Entry(e) = mirror.get(index) {
            entries.push(e);
        }
    }
    ctx.trace.detail(ctx.now_us, || {
        format!("node {id} commit {} -> {commit}", *commit_noted)
    });
    *commit_noted = commit;
    if !entries.is_empty() {
        ctx.history.record_committed(&entries);
        ctx.stats.committed_index = ctx.stats.committed_index.max(commit);
        ctx.obs.push(Observation::Committed { node: id, entries });
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
