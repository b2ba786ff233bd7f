//! The world: nodes, clients, network and faults, driven by one event queue and one random
//! generator, with the checkers run after every step.

use std::collections::BTreeMap;

use tenure_core::config::Config;
use tenure_core::drift::DriftPpm;
use tenure_core::sm::{Command, Response, SessionId};
use tenure_core::types::{Index, NodeId};

use crate::checkers::{self, Checker, View};
use crate::client::{Client, ClientAction, ClientEnv, ClientInput, ClientTimer};
use crate::driver::{Drive, DriveCtx, NodeSlot};
use crate::faults::{FaultMix, FAULT_TICK_US};
use crate::history::History;
use crate::network::{Network, Route};
use crate::observe::{ClientId, Observation, OpId};
use crate::options::{InjectBug, SimOptions};
use crate::protocol::{Addr, Packet};
use crate::queue::EventQueue;
use crate::report::{SeedReport, Stats, Violation};
use crate::rng::SimRng;
use crate::time::{slowest_tick_us, Rate, SimTimeUs, US_PER_MS};
use crate::trace::{Trace, TraceKind};

mod closes;
mod inject;
mod scenario;
mod streams;

/// How long a crashed node stays down (true time).
pub(crate) const DOWNTIME_US: (u64, u64) = (10 * US_PER_MS, 2_000 * US_PER_MS);
/// How long a node that crashed right after voting stays down: short, so that it can vote
/// again in the same election if its vote was not durable.
const VOTE_CRASH_DOWNTIME_US: (u64, u64) = (US_PER_MS, 30 * US_PER_MS);
/// Keepalive receipts remembered until their acknowledgement.
const KEEPALIVES_TRACKED_MAX: usize = 4_096;
/// Share of seeds whose drift bound ρ is drawn from `WIDE_DRIFT_MAX` instead of the default.
const WIDE_DRIFT_SHARE: f64 = 0.3;
/// Range of the wide drift bounds (the configuration accepts up to 10 %).
const WIDE_DRIFT_MAX: (DriftPpm, DriftPpm) = (DriftPpm(20_000), DriftPpm(90_000));
/// Range of the per-seed snapshot threshold.
const SNAPSHOT_THRESHOLD_ENTRIES: (u64, u64) = (32, 256);
/// Share of seeds with a tiny snapshot threshold: snapshots race in-flight proposals and
/// followers are sent `InstallSnapshot` all the time.
const SMALL_SNAPSHOT_SHARE: f64 = 0.15;
/// Range of the tiny snapshot threshold.
const SMALL_SNAPSHOT_THRESHOLD_ENTRIES: (u64, u64) = (2, 12);
/// Share of seeds whose write-ahead log writes records of only 1 to 4 KiB, so that a Ready's
/// entries span several records and crashes tear the log between the records of one write.
const SMALL_RECORD_SHARE: f64 = 0.3;
/// Share of seeds whose AppendEntries carry 1 to 4 entries.
const SMALL_BATCH_SHARE: f64 = 0.3;
/// Share of seeds whose node clocks sit at the drift bound.
const CLOCKS_AT_BOUND_SHARE: f64 = 0.3;
/// Share of seeds whose leaders propose lease checkpoints only every T/2 to T ticks (the
/// default is a third of T). A checkpoint covers keepalives received up to two intervals
/// after it, so with intervals of T/2 or more its coverage outlasts the election timeout and
/// the leader lease alone must keep a deposed leader from acknowledging: the vote refusal
/// and the lease's drift margin become visible to the lease-safety checks.
const LONG_CHECKPOINT_SHARE: f64 = 0.25;
/// Share of seeds at the lease's edge: a drift bound near the largest the configuration
/// accepts, clocks at the bound (pairs of nodes differ by ρ), a long election timeout and long
/// checkpoint intervals. With many ticks per T the tick-rounding allowance (2 ticks) is a
/// small part of it, so a lease that lost its drift margin outlasts the followers' vote
/// refusal by whole ticks, and a successor can be elected inside that window.
const LEASE_EDGE_SHARE: f64 = 0.15;
/// Drift bounds of the lease-edge seeds.
const LEASE_EDGE_DRIFT: (DriftPpm, DriftPpm) = (DriftPpm(85_000), DriftPpm(99_000));
/// Election timeouts of the lease-edge seeds, in ticks.
const LEASE_EDGE_TIMEOUT_TICKS: (u64, u64) = (50, 80);
/// Share of seeds whose leaders pipeline persistence: they replicate a Ready's entries while
/// their own fsync of them runs, and count the acknowledgements that arrive meanwhile.
const PIPELINED_SHARE: f64 = 0.3;
/// How long a pipelined fsync takes, true time: long enough for followers to acknowledge.
const FSYNC_US: (u64, u64) = (US_PER_MS, 8 * US_PER_MS);
/// How long a background snapshot takes, encoded and durable (`Config::snapshot_in_background`):
/// from an fsync's time to several election timeouts, so that entries, crashes and a
/// leader's `InstallSnapshot` all happen while one is being taken.
const SNAPSHOT_TAKE_US: (u64, u64) = (US_PER_MS, 800 * US_PER_MS);
/// A written snapshot waits up to this long (in eight steps, by its index, so that no draw of
/// the generator changes) for the driver's next pass: the inputs that arrive meanwhile are
/// handled first, as a server's driver handles its batch before the snapshot thread's report.
const SNAPSHOT_WAKE_US: u64 = 4 * US_PER_MS;
/// In the safety phase, probability that a leader crashes instead of completing a pipelined
/// fsync: its entries are on followers' disks, possibly committed, and not on its own.
const FSYNC_CRASH_P: f64 = 0.1;
/// Share of seeds whose nodes run with fast election on (`Config::fast_election`): they
/// learn of closed connections and refused reconnects, and forged resets are a fault.
const FAST_ELECTION_SHARE: f64 = 0.5;
/// Longest time a removed member keeps running.
const DECOMMISSION_LINGER_US_MAX: u64 = 2_000 * US_PER_MS;
/// Share of seeds whose clients are tenants: every command charged to one of two
/// principals under a small quota, and elections and keys deleted now and then.
const TENANCY_SHARE: f64 = 0.3;
/// Range of the per-decision probability of a delete in tenancy seeds.
const TENANCY_DELETE: (f64, f64) = (0.02, 0.15);

/// Scheduled happenings.
enum Event {
    Tick {
        node: NodeId,
        incarnation: u64,
    },
    /// A pipelined Ready's fsync completes (see `NodeSlot::pipelined`).
    FsyncDone {
        node: NodeId,
        incarnation: u64,
    },
    /// A background snapshot is encoded and durable (see `NodeSlot::snapshot_taking`).
    SnapshotTaken {
        node: NodeId,
        incarnation: u64,
    },
    /// The wake-up a snapshot thread sends its driver: a pass that finishes the snapshot, if
    /// an input has not already led to one.
    SnapshotWake {
        node: NodeId,
        incarnation: u64,
    },
    Deliver {
        from: Addr,
        to: Addr,
        packet: Packet,
    },
    Client {
        client: ClientId,
        timer: ClientTimer,
    },
    FaultTick,
    HealPartition {
        id: u64,
    },
    Restart {
        node: NodeId,
        incarnation: u64,
    },
    Resume {
        node: NodeId,
        pause_gen: u64,
    },
    /// Crash a node now (if it still runs the same incarnation).
    CrashNow {
        node: NodeId,
        incarnation: u64,
    },
    /// A step of a closed peer connection at `at` (fast-election seeds; see `closes`).
    Connection {
        at: NodeId,
        incarnation: u64,
        peer: NodeId,
        step: closes::Close,
    },
    /// The next thing a client sent on its keepalive stream `stream` reaches the node
    /// (fate-sharing seeds; see `streams`).
    StreamDeliver {
        stream: u64,
    },
    /// Servers close the streams of clients they could not reach for their idle timeout
    /// (fate-sharing seeds).
    StreamSweep,
    Heal,
    /// A leadership transfer with nothing failing, to be seen through (liveness).
    TransferCheck,
    Quiesce,
    End,
}

/// One seed's simulation.
pub struct World {
    opts: SimOptions,
    now_us: SimTimeUs,
    rng: SimRng,
    queue: EventQueue<Event>,
    network: Network,
    mix: FaultMix,
    nodes: BTreeMap<NodeId, NodeSlot>,
    /// Nodes not decommissioned, for clients to contact.
    live_ids: Vec<NodeId>,
    next_node_id: NodeId,
    /// A started node waiting to be added to the configuration.
    pending_join: Option<NodeId>,
    clients: Vec<Client>,
    campaigners: BTreeMap<ClientId, (String, SessionId)>,
    history: History,
    checkers: Vec<Box<dyn Checker>>,
    obs: Vec<Observation>,
    out: Vec<(Addr, Addr, Packet)>,
    actions: Vec<ClientAction>,
    trace: Trace,
    stats: Stats,
    violations: Vec<Violation>,
    /// Safety phase with faults on.
    faults_on: bool,
    healed_at_us: Option<SimTimeUs>,
    quiesced: bool,
    next_partition_id: u64,
    next_op: OpId,
    drift_max: DriftPpm,
    /// Entries applied between snapshots, drawn per seed: small values make snapshots and
    /// `InstallSnapshot` frequent (and keep the core's per-step invariant checks cheap).
    snapshot_threshold_entries: u64,
    /// T in true time for the slowest clock (the liveness deadline is ten of these).
    election_timeout_us: SimTimeUs,
    /// Most entries per AppendEntries, drawn per seed: small batches make a catching-up
    /// follower take many round trips, so entries of earlier terms reach a majority well
    /// before a new leader's own no-op does (the window of Raft §5.4.2).
    append_entries_max: usize,
    /// T in ticks, drawn per seed (`LONG_TIMEOUT_SHARE`).
    election_timeout_ticks: u64,
    /// Ticks between a leader's lease checkpoints, drawn per seed (`LONG_CHECKPOINT_SHARE`).
    lease_checkpoint_ticks: u64,
    /// Node clocks sit at the drift bound (±ρ/2, in opposite directions) instead of
    /// anywhere within it, in some seeds.
    clocks_at_bound: bool,
    /// How long a removed member keeps running before it is shut down, drawn per seed.
    decommission_linger_us: SimTimeUs,
    /// Removed members not yet shut down, and since when they are out of the configuration.
    removed_since_us: BTreeMap<NodeId, SimTimeUs>,
    /// The scripted fault shape being played, if any.
    scenario: Option<scenario::Scenario>,
    /// Keepalives handed to a node: (node, tag) → true time of receipt, to turn an ack into
    /// the promise it makes. Bounded like the driver's own waiter list.
    keepalive_received_us: BTreeMap<(NodeId, u64), SimTimeUs>,
    /// The lease-handover shape is armed at this leader (see `FaultMix::lease_handover`).
    handover_at: Option<NodeId>,
    /// The armed hand-over already went by transfer (`World::maybe_hand_over_by_transfer`).
    handover_transferred: bool,
    /// A lease-edge seed (see `LEASE_EDGE_SHARE`): the lease-edge shapes may run.
    lease_edge: bool,
    /// A scenario holds the workload: clients start nothing and send no keepalives.
    hush: bool,
    /// Leaders pipeline persistence in this seed (`PIPELINED_SHARE`).
    pipelined: bool,
    /// Nodes run with fast election on (`FAST_ELECTION_SHARE`), and learn of closed
    /// connections (`closes`).
    /// The fast-election seeds' own random stream, after their draws: whether a stale-refusal
    /// shape starts (`scenario.rs`), so that every other draw stays as it was.
    stale_refusal_rng: SimRng,
    fast_election: bool,
    /// Per fault tick: probability of forged resets of the leader's connections (fast
    /// election seeds only).
    forged_reset: f64,
    /// Fate-sharing seeds (`FATE_SHARING_SHARE`): how clients bind sessions and exit.
    fate: Option<crate::client::FateSharing>,
    /// Fate-sharing seeds: how long a server lets a client it cannot reach keep a stream
    /// open before it closes the connection (the server's idle and ping timeouts).
    stream_idle_close_us: SimTimeUs,
    /// Fate-sharing seeds: the clients' keepalive streams, by id, as TCP carries them.
    pipes: BTreeMap<u64, streams::Pipe>,
    /// Tenancy seeds (`TENANCY_SHARE`): quotas per principal, and deletes.
    tenancy: Option<crate::client::Tenancy>,
    /// Small-record seeds (`SMALL_RECORD_SHARE`): the write-ahead log's largest record, so
    /// that one Ready's writes span several records and a crash can tear between them.
    record_bytes_max: Option<u32>,
}

impl World {
    /// Builds the world of one seed.
    pub fn new(opts: &SimOptions, seed: u64) -> World {
        let mut rng = SimRng::new(seed);
        let mut mix = FaultMix::draw(&mut rng, opts.faults);
        let voters: Vec<NodeId> = (1..=opts.nodes as NodeId).collect();
        let mut template = Config::new(1, voters.clone());
        if opts.faults && rng.chance(WIDE_DRIFT_SHARE) {
            // Wide drift bounds make every drift margin and padding many ticks long, so that
            // losing one of them shows instead of hiding in the tick-rounding allowances.
            template.clock_drift_max = draw_drift(&mut rng, WIDE_DRIFT_MAX);
        }
        // Drawn from a stream of its own, so that adding these left every other draw of every
        // seed as it was.
        let mut own = SimRng::new(seed ^ 0x6c65_6173_6563_6b70);
        let lease_edge = opts.faults && own.chance(LEASE_EDGE_SHARE);
        if lease_edge {
            template.clock_drift_max = draw_drift(&mut own, LEASE_EDGE_DRIFT);
            template.election_timeout_ticks =
                own.between(LEASE_EDGE_TIMEOUT_TICKS.0, LEASE_EDGE_TIMEOUT_TICKS.1);
        }
        let pipelined = opts.faults && own.chance(PIPELINED_SHARE);
        // A stream of its own again, so that every earlier draw of every seed stays as it was.
        let mut fast = SimRng::new(seed ^ 0x6661_7374_656c_6563);
        let fast_election =
            fast.chance(FAST_ELECTION_SHARE) || opts.bug == Some(InjectBug::CloseDropsVoteRefusal);
        let forged_reset = fast.uniform(closes::FORGED_RESET.0, closes::FORGED_RESET.1);
        // And again a stream of its own for fate-sharing, so that the seeds without it run
        // exactly as before.
        let (fate, stream_idle_close_us) = streams::draw(seed, opts);
        let tenancy = draw_tenancy(seed, opts);
        // A stream of its own, so that every earlier draw of every seed stays as it was.
        let mut records = SimRng::new(seed ^ 0x7265_636f_7264_7321);
        let record_bytes_max = (opts.faults && records.chance(SMALL_RECORD_SHARE)).then(|| {
            records.between(
                u64::from(tenure_wal::RECORD_BYTES_MIN),
                4 * u64::from(tenure_wal::RECORD_BYTES_MIN),
            ) as u32
        });
        if lease_edge {
            // A fast network: the window in which a lease without its margin outlasts the
            // vote refusal is a few ticks, and round trips must not fill it.
            mix.network.delay_max_us = crate::network::DELAY_MIN_US;
            mix.network.slow_delay_max_us = 0;
        }
        let drift_max = template.clock_drift_max;
        let election_timeout_ticks = template.election_timeout_ticks;
        let lease_checkpoint_ticks =
            if lease_edge || (opts.faults && own.chance(LONG_CHECKPOINT_SHARE)) {
                own.between(election_timeout_ticks / 2 + 1, election_timeout_ticks)
            } else {
                template.lease_checkpoint_ticks
            };
        let snapshot_threshold_entries = if opts.faults && rng.chance(SMALL_SNAPSHOT_SHARE) {
            rng.between(
                SMALL_SNAPSHOT_THRESHOLD_ENTRIES.0,
                SMALL_SNAPSHOT_THRESHOLD_ENTRIES.1,
            )
        } else {
            rng.between(SNAPSHOT_THRESHOLD_ENTRIES.0, SNAPSHOT_THRESHOLD_ENTRIES.1)
        };
        let append_entries_max = if opts.faults && rng.chance(SMALL_BATCH_SHARE) {
            rng.between(1, 4) as usize
        } else {
            64
        };
        let wide = template.clock_drift_max > DriftPpm::DEFAULT;
        let clocks_at_bound = lease_edge
            || (opts.faults && rng.chance(if wide { 0.7 } else { CLOCKS_AT_BOUND_SHARE }));
        let decommission_linger_us = if opts.faults && rng.chance(0.5) {
            rng.between(0, DECOMMISSION_LINGER_US_MAX)
        } else {
            0
        };
        let election_timeout_us = template.election_timeout_ticks * slowest_tick_us(drift_max);
        let mut world = World {
            opts: opts.clone(),
            now_us: 0,
            rng,
            queue: EventQueue::default(),
            network: Network::new(mix.network),
            mix,
            nodes: BTreeMap::new(),
            live_ids: voters.clone(),
            next_node_id: opts.nodes as NodeId + 1,
            pending_join: None,
            clients: Vec::new(),
            campaigners: BTreeMap::new(),
            history: History::new(),
            checkers: checkers::all(),
            obs: Vec::new(),
            out: Vec::new(),
            actions: Vec::new(),
            trace: Trace::new(opts.trace, opts.trace_raft),
            stats: Stats::default(),
            violations: Vec::new(),
            faults_on: opts.faults,
            healed_at_us: None,
            quiesced: false,
            next_partition_id: 0,
            next_op: 0,
            drift_max,
            snapshot_threshold_entries,
            election_timeout_us,
            append_entries_max,
            election_timeout_ticks,
            lease_checkpoint_ticks,
            clocks_at_bound,
            decommission_linger_us,
            removed_since_us: BTreeMap::new(),
            scenario: None,
            keepalive_received_us: BTreeMap::new(),
            handover_at: None,
            handover_transferred: false,
            lease_edge,
            hush: false,
            pipelined,
            fast_election,
            stale_refusal_rng: fast,
            forged_reset,
            fate,
            stream_idle_close_us,
            pipes: BTreeMap::new(),
            tenancy,
            record_bytes_max,
        };
        for id in voters.iter().copied() {
            let config = world.node_config(id, voters.clone());
            let period = world.draw_tick_period();
            world.nodes.insert(
                id,
                NodeSlot::new(id, config, period, true, world.new_disk()),
            );
            if let Some(slot) = world.nodes.get_mut(&id) {
                slot.pipelined = pipelined;
            }
        }
        for id in 0..opts.clients as ClientId {
            let client = Client::new(id, &mut world.rng, &voters, drift_max);
            world.clients.push(client);
        }
        world
    }

    /// Both snapshot rules run (`Config::snapshot_grows_with_state`), chosen by the
    /// threshold's parity so that no seed draws one more number than before.
    fn snapshot_grows_with_state(&self) -> bool {
        self.snapshot_threshold_entries % 2 == 1
    }

    /// Snapshots are taken inside the step or in the background
    /// (`Config::snapshot_in_background`), chosen by the threshold's second bit, for the same
    /// reason.
    fn snapshot_in_background(&self) -> bool {
        (self.snapshot_threshold_entries / 2) % 2 == 1
    }

    fn node_config(&self, id: NodeId, initial_voters: Vec<NodeId>) -> Config {
        let mut config = Config::new(id, initial_voters);
        config.snapshot_threshold_entries = self.snapshot_threshold_entries;
        config.snapshot_grows_with_state = self.snapshot_grows_with_state();
        config.snapshot_in_background = self.snapshot_in_background();
        config.append_entries_max = self.append_entries_max;
        config.election_timeout_ticks = self.election_timeout_ticks;
        config.lease_checkpoint_ticks = self.lease_checkpoint_ticks;
        config.clock_drift_max = self.drift_max;
        config.fast_election = self.fast_election;
        config
            .validate()
            .expect("the simulator's node configuration is valid");
        config
    }

    /// 10 ms × (1 + drift), drift uniform in [-ρ/2, ρ/2].
    /// In seeds with clocks at the bound, ±ρ/2 at random, so that pairs of nodes differ by ρ.
    fn draw_tick_period(&mut self) -> u64 {
        let rate = if self.clocks_at_bound {
            Rate::at_bound(self.drift_max, self.rng.chance(0.5))
        } else {
            Rate::uniform(&mut self.rng, self.drift_max)
        };
        rate.tick_period_us()
    }

    /// Runs the seed to the end or to the first violation.
    pub fn run(mut self, seed: u64) -> SeedReport {
        self.start();
        while let Some((time_us, event)) = self.queue.pop() {
            self.now_us = time_us;
            let end = matches!(event, Event::End);
            self.handle(event);
            if self.scenario.is_some() {
                self.scenario_watch();
            }
            self.announce_exits();
            self.flush();
            self.check_step();
            if !self.violations.is_empty() {
                // Make sure the checkers were looking at the nodes' real logs.
                self.check_mirrors();
                break;
            }
            if end {
                break;
            }
        }
        SeedReport {
            seed,
            trace_hash: self.trace.hash(),
            violations: self.violations,
            simulated_us: self.now_us,
            stats: self.stats,
            fault_mix: self.mix.describe(),
            trace: self.trace.take_lines(),
        }
    }

    fn start(&mut self) {
        self.trace
            .log(0, || format!("fault mix: {}", self.mix.describe()));
        let grows = self.snapshot_grows_with_state();
        let background = self.snapshot_in_background();
        self.trace.log(0, || {
            format!(
                "seed shape: drift bound {}{}, snapshot every {} entries{}{}, at most {} entries per AppendEntries{}, removed members linger {} ms{}",
                self.drift_max,
                if self.clocks_at_bound { " (clocks at the bound)" } else { "" },
                self.snapshot_threshold_entries,
                if grows { " and as many as the state's records" } else { "" },
                if background { " (taken in the background)" } else { "" },
                self.append_entries_max,
                match self.record_bytes_max {
                    Some(b) => format!(", log records of at most {b} bytes"),
                    None => String::new(),
                },
                self.decommission_linger_us / US_PER_MS,
                if self.fast_election {
                    format!(", fast election (forged resets {:.3}/tick)", self.forged_reset)
                } else {
                    String::new()
                }
            )
        });
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.start_node(id);
        }
        for i in 0..self.clients.len() {
            self.with_client(i, |client, env| client.start(env));
        }
        if self.faults_on {
            self.queue.push(FAULT_TICK_US, Event::FaultTick);
        }
        if self.fate.is_some() {
            self.queue.push(streams::SWEEP_US, Event::StreamSweep);
        }
        let safety_us = self.opts.safety_ms * US_PER_MS;
        let liveness_us = self.opts.liveness_ms * US_PER_MS;
        self.queue.push(safety_us, Event::Heal);
        self.queue
            .push(safety_us + liveness_us / 4, Event::TransferCheck);
        self.queue.push(safety_us + liveness_us / 2, Event::Quiesce);
        self.queue.push(safety_us + liveness_us, Event::End);
        self.flush();
        self.check_step();
    }

    /// A node's empty disk, as this seed's log is shaped.
    pub(super) fn new_disk(&self) -> crate::disk::Disk {
        self.opts.new_disk(self.record_bytes_max)
    }

    /// Starts or restarts a node from its disk and begins its tick chain at a random phase.
    fn start_node(&mut self, id: NodeId) {
        let seed = self.rng.next_u64();
        let result = self.with_node(id, |slot, ctx| slot.start(seed, ctx));
        match result {
            Some(Ok(drive)) => {
                self.after_drive(id, drive);
                if let Some(slot) = self.nodes.get_mut(&id) {
                    let phase = self.rng.below(slot.tick_period_us);
                    let incarnation = slot.incarnation;
                    // The clock's tick 0: one period before its first tick.
                    slot.last_tick_us = (self.now_us + phase).saturating_sub(slot.tick_period_us);
                    self.queue.push(
                        self.now_us + phase,
                        Event::Tick {
                            node: id,
                            incarnation,
                        },
                    );
                }
            }
            Some(Err(detail)) => self.violation("recovery", detail),
            None => {}
        }
    }

    /// Calls `f` on node `id`'s core, as an operator's request would reach it; `None` when
    /// the node is down or between a Ready and its fsync. What `f` produces goes out with
    /// the node's next drive ([`World::drive_node`]).
    pub(super) fn in_node<R>(
        &mut self,
        id: NodeId,
        f: impl FnOnce(&mut tenure_core::node::Node) -> R,
    ) -> Option<R> {
        let node = self.nodes.get_mut(&id)?.node_mut()?;
        Some(crate::core_call::in_core(|| f(node)))
    }

    /// Drives node `id` now (its messages out, its clients answered), if it is up.
    pub(super) fn drive_node(&mut self, id: NodeId) {
        if let Some(drive) = self.with_node(id, |slot, ctx| slot.drive(ctx)) {
            self.after_drive(id, drive);
        }
    }

    fn with_node<R>(
        &mut self,
        id: NodeId,
        f: impl FnOnce(&mut NodeSlot, &mut DriveCtx<'_>) -> R,
    ) -> Option<R> {
        let slot = self.nodes.get_mut(&id)?;
        let mut ctx = DriveCtx {
            now_us: self.now_us,
            rng: &mut self.rng,
            trace: &mut self.trace,
            stats: &mut self.stats,
            obs: &mut self.obs,
            history: &mut self.history,
            out: &mut self.out,
            crash_after_vote: if self.faults_on {
                self.mix.crash_after_vote
            } else {
                0.0
            },
            core_bugs: InjectBug::core_bugs(self.opts.bug),
            driver_bugs: tenure_driver::DriverBugs {
                not_leader_after_snapshot: self.opts.bug == Some(InjectBug::NotLeaderAfterSnapshot),
            },
            snapshot_log_decides: self.opts.bug == Some(InjectBug::SnapshotLogDecides),
        };
        Some(f(slot, &mut ctx))
    }

    fn with_client(&mut self, index: usize, f: impl FnOnce(&mut Client, &mut ClientEnv<'_>)) {
        let Some(client) = self.clients.get_mut(index) else {
            return;
        };
        let mut env = ClientEnv {
            now_us: self.now_us,
            rng: &mut self.rng,
            out: &mut self.actions,
            obs: &mut self.obs,
            trace: &mut self.trace,
            stats: &mut self.stats,
            nodes: &self.live_ids,
            campaigners: &self.campaigners,
            mix: &self.mix,
            faults_on: self.faults_on,
            quiesced: self.quiesced,
            hush: self.hush,
            lease_from_receive: self.opts.bug == Some(InjectBug::LeaseFromReceiveTime),
            fate: self.fate,
            tenancy: self.tenancy,
            drift_max: self.drift_max,
            next_op: &mut self.next_op,
        };
        f(client, &mut env);
        let id = client.id();
        let mut actions = std::mem::take(&mut self.actions);
        for action in actions.drain(..) {
            match action {
                ClientAction::Send {
                    to,
                    request:
                        request @ crate::protocol::ClientRequest::Keepalive {
                            stream: Some(stream),
                            ..
                        },
                } => self.send_on_stream(id, to, stream, streams::Sent::Keepalive(request)),
                ClientAction::Send { to, request } => {
                    self.out
                        .push((Addr::Client(id), Addr::Node(to), Packet::Request(request)))
                }
                ClientAction::Timer { at_us, timer } => {
                    self.queue.push(at_us, Event::Client { client: id, timer })
                }
                ClientAction::Campaigning(Some(c)) => {
                    self.campaigners.insert(id, c);
                }
                ClientAction::Campaigning(None) => {
                    self.campaigners.remove(&id);
                }
                ClientAction::CloseStream { to, stream } => {
                    self.send_on_stream(id, to, stream, streams::Sent::Close)
                }
            }
        }
        // Drained in place and put back, so the buffer's allocation is reused.
        self.actions = actions;
    }

    /// Deals with how a node's step ended.
    fn after_drive(&mut self, id: NodeId, drive: Drive) {
        // The disk work the step started completes later: a pipelined fsync, a background
        // snapshot (drawn in this order, so that runs replay).
        let due = match self.nodes.get_mut(&id) {
            Some(slot) => {
                let incarnation = slot.incarnation;
                [
                    std::mem::take(&mut slot.fsync_to_schedule).then_some((
                        FSYNC_US,
                        Event::FsyncDone {
                            node: id,
                            incarnation,
                        },
                    )),
                    std::mem::take(&mut slot.snapshot_to_schedule).then_some((
                        SNAPSHOT_TAKE_US,
                        Event::SnapshotTaken {
                            node: id,
                            incarnation,
                        },
                    )),
                ]
            }
            None => [None, None],
        };
        for ((least, most), event) in due.into_iter().flatten() {
            let delay = self.rng.between(least, most);
            self.queue.push(self.now_us + delay, event);
        }
        match drive {
            Drive::Running => {}
            Drive::Crashed { reason, torn } => {
                let kind = if torn.is_some() {
                    "crash-torn-write"
                } else {
                    "crash-after-vote"
                };
                self.stats.fault(kind);
                self.trace.event(TraceKind::Fault, self.now_us, &[1, id]);
                self.trace.log(self.now_us, || {
                    format!("fault: node {id} crashes {reason} {torn:?}")
                });
                let (lo, hi) = if torn.is_some() {
                    DOWNTIME_US
                } else {
                    VOTE_CRASH_DOWNTIME_US
                };
                self.schedule_restart(id, lo, hi);
            }
            Drive::StorageContract(detail) => self.violation("storage-contract", detail),
        }
    }

    fn schedule_restart(&mut self, id: NodeId, lo_us: u64, hi_us: u64) {
        let Some(slot) = self.nodes.get(&id) else {
            return;
        };
        let incarnation = slot.incarnation;
        let at = self.now_us + self.rng.between(lo_us, hi_us);
        self.queue.push(
            at,
            Event::Restart {
                node: id,
                incarnation,
            },
        );
    }

    fn violation(&mut self, checker: &'static str, detail: String) {
        self.violations.push(Violation {
            checker,
            time_us: self.now_us,
            detail,
        });
    }

    /// Sends every queued packet through the network.
    fn flush(&mut self) {
        // Drained in place and put back, so the buffer's allocation is reused.
        let mut out = std::mem::take(&mut self.out);
        for (from, to, packet) in out.drain(..) {
            if let (
                Addr::Node(node),
                Packet::Reply(crate::protocol::ClientReply::KeepaliveAck {
                    tag,
                    session,
                    ttl_ticks,
                }),
            ) = (from, &packet)
            {
                self.note_keepalive_ack(node, *tag, *session, *ttl_ticks);
                if let (Some(leader), Addr::Client(client)) = (self.handover_at, to) {
                    if leader == node && self.faults_on {
                        self.handover_at = None;
                        self.with_client(client as usize, |c, env| c.go_silent(env));
                        let incarnation = self.nodes.get(&node).map_or(0, |s| s.incarnation);
                        self.queue
                            .push(self.now_us, Event::CrashNow { node, incarnation });
                    }
                }
            }
            let first = match self.network.route(from, to, &mut self.rng) {
                Route::Dropped => {
                    self.stats.messages_dropped += 1;
                    self.trace.event(
                        TraceKind::Network,
                        self.now_us,
                        &[from.code(), to.code(), 0],
                    );
                    continue;
                }
                Route::Once(first) => first,
                Route::Twice(first, duplicate) => {
                    // The copy is scheduled first, so that at equal times it arrives first.
                    self.queue.push(
                        self.now_us + duplicate,
                        Event::Deliver {
                            from,
                            to,
                            packet: packet.clone(),
                        },
                    );
                    first
                }
            };
            self.queue
                .push(self.now_us + first, Event::Deliver { from, to, packet });
        }
        // Anything a client sent meanwhile stays queued for the next flush.
        if self.out.is_empty() {
            self.out = out;
        }
    }

    /// Turns an acknowledgement into the promise it makes: the session lives at least until
    /// the acknowledging node's clock has run `ttl` ticks from the keepalive's receipt.
    fn note_keepalive_ack(&mut self, node: NodeId, tag: u64, session: SessionId, ttl: u64) {
        let Some(received_us) = self.keepalive_received_us.remove(&(node, tag)) else {
            return;
        };
        let Some(slot) = self.nodes.get(&node) else {
            return;
        };
        // A node crashed since its step sent this acknowledgement in its last term.
        let term = slot.status.as_ref().map_or(slot.exit_term, |s| s.term);
        let promise_us = received_us + ttl * slot.tick_period_us;
        self.obs.push(Observation::KeepaliveAcked {
            node,
            term,
            session,
            promise_us,
        });
    }

    /// Feeds the step's observations to every checker.
    fn check_step(&mut self) {
        let mut obs = std::mem::take(&mut self.obs);
        for o in obs.drain(..) {
            let canonical = match &o {
                Observation::Applied {
                    applied,
                    leader_changes,
                    ..
                } => self.history.feed_applied(applied, leader_changes),
                Observation::Committed { .. } => self.history.drain(),
                _ => Vec::new(),
            };
            self.dispatch(&o);
            for entry in canonical {
                self.note_canonical(&entry);
                self.dispatch(&Observation::Canonical(entry));
            }
        }
        self.obs = obs;
    }

    fn dispatch(&mut self, o: &Observation) {
        let view = View {
            now_us: self.now_us,
            nodes: &self.nodes,
            history: &self.history,
            healed_at_us: self.healed_at_us,
            election_timeout_us: self.election_timeout_us,
        };
        for checker in self.checkers.iter_mut() {
            if let Some(detail) = checker.observe(o, &view) {
                self.violations.push(Violation {
                    checker: checker.name(),
                    time_us: self.now_us,
                    detail,
                });
            }
        }
    }

    fn note_canonical(&mut self, entry: &crate::observe::CanonicalEntry) {
        if matches!(entry.response, Response::Ended { .. }) {
            match entry.command {
                Command::Expire { .. } => self.stats.sessions_expired += 1,
                Command::Release { .. } => self.stats.sessions_released += 1,
                _ => {}
            }
        }
        self.trace.detail(self.now_us, || {
            format!(
                "applied {} (term {}): {:?} -> {:?}",
                entry.index, entry.term, entry.command, entry.response
            )
        });
        if self.trace.readable() {
            for change in &entry.leader_changes {
                let line = match &change.leader {
                    Some(l) => format!(
                        "election {}: session {} leads with token {} (index {})",
                        change.election, l.session, l.token, change.index
                    ),
                    None => format!(
                        "election {}: no leader (index {})",
                        change.election, change.index
                    ),
                };
                self.trace.log(self.now_us, || line);
            }
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Tick { node, incarnation } => self.on_tick(node, incarnation),
            Event::FsyncDone { node, incarnation } => self.on_fsync_done(node, incarnation),
            Event::SnapshotTaken { node, incarnation } => self.on_snapshot_taken(node, incarnation),
            Event::SnapshotWake { node, incarnation } => self.on_snapshot_wake(node, incarnation),
            Event::Deliver { from, to, packet } => self.on_deliver(from, to, packet),
            Event::Client { client, timer } => {
                self.trace
                    .event(TraceKind::ClientTimer, self.now_us, &[client, timer.code()]);
                self.with_client(client as usize, |c, env| {
                    c.input(ClientInput::Timer(timer), env)
                });
            }
            Event::FaultTick => self.on_fault_tick(),
            Event::HealPartition { id } => {
                if self.network.heal(id) {
                    self.trace.event(TraceKind::Fault, self.now_us, &[2, id]);
                    self.trace
                        .log(self.now_us, || format!("heal: partition {id}"));
                }
            }
            Event::Restart { node, incarnation } => {
                let due = self.nodes.get(&node).is_some_and(|s| {
                    !s.decommissioned && !s.is_up() && s.incarnation == incarnation
                });
                if due {
                    self.trace.event(TraceKind::Fault, self.now_us, &[3, node]);
                    self.trace
                        .log(self.now_us, || format!("restart: node {node}"));
                    self.start_node(node);
                }
            }
            Event::Resume { node, pause_gen } => {
                let due = self
                    .nodes
                    .get(&node)
                    .is_some_and(|s| s.paused && s.pause_gen == pause_gen);
                if due {
                    self.resume(node);
                }
            }
            Event::CrashNow { node, incarnation } => {
                let due = self
                    .nodes
                    .get(&node)
                    .is_some_and(|s| s.is_up() && s.incarnation == incarnation);
                if due && self.faults_on {
                    if let Some(slot) = self.nodes.get_mut(&node) {
                        slot.crash();
                    }
                    self.stats.fault("crash");
                    self.trace.event(TraceKind::Fault, self.now_us, &[6, node]);
                    self.trace.log(self.now_us, || {
                        format!(
                            "fault: leader {node} crashes right after acknowledging a keepalive"
                        )
                    });
                    self.schedule_restart(node, DOWNTIME_US.0, DOWNTIME_US.1);
                }
            }
            Event::Connection {
                at,
                incarnation,
                peer,
                step,
            } => self.on_connection(at, incarnation, peer, step),
            Event::StreamDeliver { stream } => self.on_stream_deliver(stream),
            Event::StreamSweep => self.sweep_streams(),
            Event::Heal => self.heal(),
            Event::TransferCheck => self.transfer_check(),
            Event::Quiesce => self.quiesced = true,
            Event::End => self.end(),
        }
    }

    fn on_tick(&mut self, id: NodeId, incarnation: u64) {
        let Some(slot) = self.nodes.get(&id) else {
            return;
        };
        if slot.incarnation != incarnation || !slot.is_up() {
            return;
        }
        let period = slot.tick_period_us;
        let paused = slot.paused;
        let persisting = slot.persisting();
        if let Some(slot) = self.nodes.get_mut(&id) {
            slot.last_tick_us = self.now_us;
        }
        self.queue.push(
            self.now_us + period,
            Event::Tick {
                node: id,
                incarnation,
            },
        );
        if paused {
            if let Some(slot) = self.nodes.get_mut(&id) {
                slot.missed_ticks += 1;
            }
            return;
        }
        self.trace.event(TraceKind::Tick, self.now_us, &[id]);
        if persisting {
            self.with_node(id, |slot, ctx| slot.tick_while_persisting(ctx));
            self.after_drive(id, Drive::Running);
            return;
        }
        if let Some(drive) = self.with_node(id, |slot, ctx| slot.tick(ctx)) {
            self.after_drive(id, drive);
        }
    }

    fn on_deliver(&mut self, from: Addr, to: Addr, packet: Packet) {
        if self.network.is_blocked(from, to) {
            self.stats.messages_dropped += 1;
            return;
        }
        match to {
            Addr::Node(id) => {
                let Some(slot) = self.nodes.get_mut(&id) else {
                    return;
                };
                if !slot.is_up() {
                    return;
                }
                if slot.paused {
                    slot.held.push_back((from, packet));
                    return;
                }
                if slot.persisting() {
                    self.deliver_while_persisting(id, from, packet);
                    return;
                }
                if self.handover_at == Some(id)
                    && matches!(
                        packet,
                        Packet::Request(crate::protocol::ClientRequest::Keepalive { .. })
                    )
                {
                    self.maybe_hand_over_by_transfer(id);
                }
                self.deliver_to_node(id, from, packet);
            }
            Addr::Client(client) => {
                if let Packet::Reply(reply) = packet {
                    self.trace
                        .event(TraceKind::ClientReply, self.now_us, &[client]);
                    self.with_client(client as usize, |c, env| {
                        c.input(ClientInput::Reply(reply), env)
                    });
                }
            }
        }
    }

    fn deliver_to_node(&mut self, id: NodeId, from: Addr, packet: Packet) {
        self.count_delivery(id, from, &packet);
        if let Some(drive) = self.with_node(id, |slot, ctx| slot.receive(from, packet, ctx)) {
            self.after_drive(id, drive);
        }
    }

    /// What the world records of a packet handed to node `id`: counters, the trace, and when
    /// a keepalive arrived.
    fn count_delivery(&mut self, id: NodeId, from: Addr, packet: &Packet) {
        match packet {
            Packet::Raft(m) => {
                self.stats.messages_delivered += 1;
                self.trace
                    .detail(self.now_us, || format!("deliver {} -> {id}: {m:?}", m.from));
                self.trace.event(
                    TraceKind::Deliver,
                    self.now_us,
                    &[from.code(), id, m.term, body_code(m.body.kind())],
                );
            }
            Packet::Request(crate::protocol::ClientRequest::Keepalive { tag, .. }) => {
                if self.keepalive_received_us.len() >= KEEPALIVES_TRACKED_MAX {
                    self.keepalive_received_us.pop_first();
                }
                self.keepalive_received_us.insert((id, *tag), self.now_us);
                self.trace
                    .event(TraceKind::ClientRequest, self.now_us, &[from.code(), id])
            }
            _ => self
                .trace
                .event(TraceKind::ClientRequest, self.now_us, &[from.code(), id]),
        }
    }

    fn resume(&mut self, id: NodeId) {
        let Some(slot) = self.nodes.get_mut(&id) else {
            return;
        };
        slot.paused = false;
        let held: Vec<(Addr, Packet)> = slot.held.drain(..).collect();
        let missed_ticks = std::mem::take(&mut slot.missed_ticks);
        self.trace
            .event(TraceKind::Fault, self.now_us, &[4, id, missed_ticks]);
        self.trace.log(self.now_us, || {
            format!(
                "resume: node {id} ({missed_ticks} ticks missed, {} packets held)",
                held.len()
            )
        });
        // The paused process's monotonic clock kept running: its driver ticks for the elapsed
        // time first, then handles what queued up. (Handling the packets first would let a
        // deposed leader whose tick count stood still acknowledge keepalives under a leader
        // lease that in truth ran out during the pause.)
        self.replay(id, missed_ticks, held);
    }

    /// Hands a node what waited while it was paused or blocked in fsync: the ticks its
    /// monotonic clock made first, then the packets in arrival order. (Handling the packets
    /// first would let a deposed leader whose tick count stood still acknowledge keepalives
    /// under a leader lease that in truth ran out meanwhile.) What arrives while it blocks
    /// in fsync again is held again.
    fn replay(&mut self, id: NodeId, missed_ticks: u64, held: Vec<(Addr, Packet)>) {
        if self.opts.pause_catch_up {
            for k in 0..missed_ticks {
                let Some(slot) = self.nodes.get_mut(&id) else {
                    break;
                };
                if !slot.is_up() {
                    break;
                }
                slot.catching_up = k + 1 != missed_ticks;
                if slot.persisting() {
                    self.with_node(id, |slot, ctx| slot.tick_while_persisting(ctx));
                    self.after_drive(id, Drive::Running);
                } else if let Some(drive) = self.with_node(id, |slot, ctx| slot.tick(ctx)) {
                    self.after_drive(id, drive);
                }
            }
            if let Some(slot) = self.nodes.get_mut(&id) {
                slot.catching_up = false;
            }
        }
        // A snapshot thread that finished while the process was stopped reports during the
        // first pass after it, as the server's driver sees it: the queued packets are handled
        // first, then the snapshot, then the Ready.
        let snapshot_done = self
            .nodes
            .get_mut(&id)
            .is_some_and(|s| std::mem::take(&mut s.snapshot_done_while_paused));
        if snapshot_done {
            let batch = self
                .nodes
                .get(&id)
                .is_some_and(|s| s.is_up() && !s.paused && !s.persisting());
            let written = self.nodes.get_mut(&id).and_then(|s| s.snapshot_written());
            if batch {
                for (from, packet) in &held {
                    self.count_delivery(id, *from, packet);
                }
                if let Some(drive) = self.with_node(id, |slot, ctx| slot.receive_batch(held, ctx)) {
                    self.after_drive(id, drive);
                }
                return;
            }
            self.schedule_snapshot_wake(id, written);
        }
        for (from, packet) in held {
            // A node may crash while catching up (right after a vote); the rest is then lost.
            let Some(slot) = self.nodes.get_mut(&id) else {
                break;
            };
            if !slot.is_up() {
                break;
            }
            if slot.paused {
                slot.held.push_back((from, packet));
            } else if slot.persisting() {
                self.deliver_while_persisting(id, from, packet);
            } else {
                self.deliver_to_node(id, from, packet);
            }
        }
    }

    fn deliver_while_persisting(&mut self, id: NodeId, from: Addr, packet: Packet) {
        if matches!(packet, Packet::Raft(_)) {
            self.stats.messages_delivered += 1;
        }
        let back = self.with_node(id, |slot, ctx| {
            slot.receive_while_persisting(from, packet, ctx)
        });
        if let Some(Some(held)) = back {
            if let Some(slot) = self.nodes.get_mut(&id) {
                slot.held.push_back(held);
            }
        }
        self.after_drive(id, Drive::Running);
    }

    /// A background snapshot is done; a stopped process, or one between a Ready and its
    /// `advance`, sees it a little later.
    fn on_snapshot_taken(&mut self, id: NodeId, incarnation: u64) {
        let Some(slot) = self.nodes.get(&id) else {
            return;
        };
        if slot.incarnation != incarnation || !slot.is_up() {
            return;
        }
        if slot.paused {
            // Reported in the first pass after the resume (`replay`).
            if let Some(slot) = self.nodes.get_mut(&id) {
                slot.snapshot_done_while_paused = true;
            }
            return;
        }
        let written = self.nodes.get_mut(&id).and_then(|s| s.snapshot_written());
        self.schedule_snapshot_wake(id, written);
    }

    /// The wake-up a snapshot thread sends once it has written the snapshot at `written`
    /// (if any): it reaches the driver up to `SNAPSHOT_WAKE_US` later, by the index.
    fn schedule_snapshot_wake(&mut self, id: NodeId, written: Option<Index>) {
        let (Some(index), Some(slot)) = (written, self.nodes.get(&id)) else {
            return;
        };
        let incarnation = slot.incarnation;
        self.queue.push(
            self.now_us + SNAPSHOT_WAKE_US * (index % 8) / 8,
            Event::SnapshotWake {
                node: id,
                incarnation,
            },
        );
    }

    /// The snapshot thread's wake-up reaches the driver: a pass finishes the written
    /// snapshot, unless an input got there first.
    fn on_snapshot_wake(&mut self, id: NodeId, incarnation: u64) {
        let Some(slot) = self.nodes.get(&id) else {
            return;
        };
        if slot.incarnation != incarnation || !slot.is_up() || slot.snapshot_waiting().is_none() {
            return;
        }
        if slot.paused || slot.persisting() {
            self.queue.push(
                self.now_us + US_PER_MS,
                Event::SnapshotWake {
                    node: id,
                    incarnation,
                },
            );
            return;
        }
        if let Some(drive) = self.with_node(id, |slot, ctx| slot.drive(ctx)) {
            self.after_drive(id, drive);
        }
    }

    fn on_fsync_done(&mut self, id: NodeId, incarnation: u64) {
        let Some(slot) = self.nodes.get(&id) else {
            return;
        };
        if slot.incarnation != incarnation || !slot.is_up() || !slot.persisting() {
            return;
        }
        if slot.paused {
            // The fsync returns to a stopped process; it sees it when it resumes.
            self.queue.push(
                self.now_us + US_PER_MS,
                Event::FsyncDone {
                    node: id,
                    incarnation,
                },
            );
            return;
        }
        let crash = self.faults_on && self.rng.chance(FSYNC_CRASH_P);
        if let Some(drive) = self.with_node(id, |slot, ctx| slot.fsync_done(crash, ctx)) {
            self.after_drive(id, drive);
        }
        let Some(slot) = self.nodes.get_mut(&id) else {
            return;
        };
        if !slot.is_up() || slot.paused || slot.persisting() {
            return;
        }
        let held: Vec<(Addr, Packet)> = slot.held.drain(..).collect();
        let missed_ticks = std::mem::take(&mut slot.missed_ticks);
        self.replay(id, missed_ticks, held);
    }

    /// The liveness phase: heal partitions, resume paused nodes, restart crashed ones, wake
    /// frozen clients, and inject nothing more.
    fn heal(&mut self) {
        self.faults_on = false;
        self.healed_at_us = Some(self.now_us);
        self.network.heal_all();
        self.trace.event(TraceKind::Fault, self.now_us, &[11]);
        self.trace.log(self.now_us, || {
            "heal: everything; the liveness phase starts".to_string()
        });
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let Some(slot) = self.nodes.get_mut(&id) else {
                continue;
            };
            if slot.decommissioned {
                continue;
            }
            slot.crash_mid_ready = false;
            if slot.paused {
                self.resume(id);
            } else if !slot.is_up() {
                self.start_node(id);
            }
        }
        for i in 0..self.clients.len() {
            self.with_client(i, |client, env| client.heal(env));
        }
        self.obs.push(Observation::Healed);
    }

    /// With every fault healed and the clients still busy, the leader hands Raft leadership
    /// to its lowest-numbered other voter that is up; the liveness checker expects that
    /// voter to lead soon (a transfer waits until its target has every entry, so it must
    /// win: a TimeoutNow sent to a target still missing one is what this sees).
    fn transfer_check(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let Some(membership) = self.nodes[&leader]
            .status
            .as_ref()
            .map(|s| s.membership.clone())
        else {
            return;
        };
        if membership.is_joint() {
            return;
        }
        let Some(to) =
            membership.voters.iter().copied().find(|v| {
                *v != leader && self.nodes.get(v).is_some_and(|s| s.is_up() && !s.paused)
            })
        else {
            return;
        };
        let result = self.in_node(leader, |n| n.transfer_leadership(to));
        self.trace.log(self.now_us, || {
            format!("liveness: leader {leader} hands Raft leadership to {to}: {result:?}")
        });
        if let Some(Ok(())) = result {
            self.obs
                .push(Observation::TransferRequested { from: leader, to });
        }
        self.drive_node(leader);
    }

    fn end(&mut self) {
        self.check_mirrors();
        self.obs.push(Observation::Finished);
    }

    /// The mirrors must agree with the nodes' own logs, or every log check was looking at the
    /// wrong thing.
    fn check_mirrors(&mut self) {
        for slot in self.nodes.values() {
            let Some(node) = slot.node() else {
                continue;
            };
            let entries = crate::core_call::in_core(|| node.log_entries());
            let mirror = slot.mirror.entries();
            let same = entries.len() == mirror.len()
                && entries
                    .iter()
                    .zip(mirror)
                    .all(|(e, m)| e.index == m.index && e.term == m.term);
            if !same {
                let detail = format!(
                    "node {}: the simulator's log mirror ({} entries after {}) disagrees with log_entries() ({} entries)",
                    slot.id,
                    mirror.len(),
                    slot.mirror.base_index(),
                    entries.len()
                );
                self.violations.push(Violation {
                    checker: "simulator-mirror",
                    time_us: self.now_us,
                    detail,
                });
                break;
            }
        }
    }
}

/// A number per message kind for the trace hash.
fn body_code(kind: &str) -> u64 {
    let mut h = crate::hash::Fnv64::new();
    h.str(kind);
    h.finish()
}

/// A drift bound uniform in `[lo, hi)`.
/// Whether a seed's clients are tenants, and their quota, from a stream of its own (so that
/// the other seeds run exactly as before). Quotas are small enough to be reached: a few
/// sessions, one to all three elections, a few keys of a few dozen bytes each.
fn draw_tenancy(seed: u64, opts: &SimOptions) -> Option<crate::client::Tenancy> {
    let mut rng = SimRng::new(seed ^ 0x7465_6e61_6e63_7921);
    let forced = matches!(
        opts.bug,
        Some(InjectBug::DeletedElectionTokensRestart | InjectBug::GrantQuotaDefinite)
    );
    if !(rng.chance(TENANCY_SHARE) || forced) {
        return None;
    }
    Some(crate::client::Tenancy {
        quota: tenure_core::sm::Quota {
            sessions: rng.between(1, 4),
            elections: rng.between(1, 3),
            keys: rng.between(1, 3),
            key_bytes: rng.between(40, 120),
        },
        delete: rng.uniform(TENANCY_DELETE.0, TENANCY_DELETE.1),
    })
}

fn draw_drift(rng: &mut SimRng, (lo, hi): (DriftPpm, DriftPpm)) -> DriftPpm {
    DriftPpm(rng.between(u64::from(lo.0), u64::from(hi.0) - 1) as u32)
}
