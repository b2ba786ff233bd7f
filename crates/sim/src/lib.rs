//! tenure-sim: a deterministic simulator that drives several `tenure-core` nodes and simulated
//! clients through faults, and checks cluster-wide properties after every step.
//!
//! # The model
//!
//! One seed determines one run. Everything random — fault mix, delays, losses, crashes,
//! client decisions, each node's own `Config::seed` — comes from one `ChaCha8Rng` seeded from
//! the run seed and passed explicitly ([`rng::SimRng`]). Simulated time is an integer number
//! of microseconds; one event queue ordered by (time, sequence number) holds node ticks,
//! packet deliveries, client timers and fault events. Only ordered collections are used, so a
//! seed replays exactly, which the trace hash proves ([`SeedReport::trace_hash`]).
//!
//! - **Nodes.** Each node ticks with its own period, 10 ms × (1 + drift) with drift uniform in
//!   [−ρ/2, ρ/2] (ρ = `Config::clock_drift_max`, in integer parts per million like every
//!   simulated clock rate), from a random phase. Its driver
//!   ([`driver`]) handles every Ready in the documented order: persist and fsync, `advance()`,
//!   send, answer clients; and takes Ready again until there is none. In pipelined seeds a
//!   leader sends a Ready's AppendEntries before its own fsync completes (1–8 ms later),
//!   keeps ticking and counts acknowledgements meanwhile (`Node::step_while_persisting`),
//!   holds other inputs for after the fsync, and sometimes crashes before it completes.
//! - **Disk** ([`disk`]): the server's write-ahead log (`tenure_wal::FileStorage`, the same
//!   code) over an in-memory file system (`tenure_wal::MemFs`). A crash is a power loss: what
//!   was not fsynced is lost; a crash *between* a Ready's write and its fsync keeps a random
//!   part of the unsynced bytes (a prefix, sometimes zeros) and of the directory changes not
//!   yet fsynced, and the Ready's messages are never sent. A restart opens the log again (it
//!   cuts a torn tail as a server would) and is `Node::new(config, recovered)` from it. In a
//!   third of the seeds the log's records are 1–4 KiB, so a Ready's writes span several
//!   records and a crash can tear between them.
//! - **Network** ([`network`]): per-packet delay (1 ms up to 2–15 ms, sometimes 20–400 ms;
//!   in a fifth of the seeds the whole network is slow, up to 50–250 ms, until heal), loss,
//!   duplication and therefore reordering; full partitions (a set of nodes, and maybe
//!   clients, cut off both ways), one-way partitions (node→node or node↔client); heal.
//! - **Faults** ([`faults`]): crashes, torn writes, crashes right after granting a vote (to
//!   probe vote durability), pauses (a node neither ticks nor handles packets; what arrives
//!   meanwhile is handled on resume), membership changes (fresh node ids, never reused; a new
//!   node starts with an empty disk and no initial voters, joins as a learner and is promoted
//!   later; voters are demoted or removed) and Raft leadership transfers. A paused node's
//!   clock keeps running: on resume its driver first delivers the ticks it missed, then the
//!   packets that queued up. Which faults a seed uses, and how often, is drawn from the seed
//!   and printed in one line. The snapshot threshold is drawn per seed too (32–256 entries),
//!   so snapshots and `InstallSnapshot` are frequent. Lease-edge seeds (15%) put the drift
//!   bound near 10% with clocks at the bound, T at 50–80 ticks, long checkpoint intervals and
//!   a fast network, and play two shapes: the leader isolated for 2–4 T, and a quiet bridge
//!   (workload hushed until the log is idle, then one leader–follower link cut).
//! - **Clients** ([`client`]): each with its own drifting clock; sessions, keepalives,
//!   campaigns, resignations, election transfers, fenced puts, reads; some freeze past their
//!   TTL and then write with their old token, some stop keepaliving so their session expires.
//!   A client believes it leads only until `send time of its last acknowledged keepalive +
//!   TTL − margin` on its own clock (DESIGN rule 4), margin = TTL × 2ρ + one 10 ms tick.
//! - **Phases.** A safety phase with faults (default 30 s), then a liveness phase (default
//!   5 s): everything is healed, paused nodes resume, crashed nodes restart, frozen clients
//!   wake, no new faults; halfway through, clients stop starting new operations.
//! - **Checkers** ([`checkers`]), one property per file, each citing its source: election
//!   safety (one leader and one vote per term), log matching, leader completeness, state
//!   machine safety, fencing, lease safety (down to each replica's session deadlines against
//!   the promises other leaders' entries made), linearizability and liveness. They see only what a
//!   driver sees (Ready contents, `status()`, the state machine digest, client observations).
//!   A panic inside the core (including `Node::check_invariants`, called after every step) is
//!   reported as `node-invariant`; a node refusing to start from its own disk as `recovery`;
//!   a Ready that breaks the storage contract as `storage-contract`.
//!
//! # What it does not model (yet)
//!
//! - Messages are never corrupted, and snapshots travel whole (`InstallSnapshot` is one
//!   message); oversize or malformed frames are the server's codec's business.
//! - Disks never return errors, never corrupt durable data and never lose an fsynced write;
//!   a torn write affects only the writes of the Ready in flight.
//! - Clock drift is a constant rate per node and client; clocks never jump. A resumed node
//!   catches up on missed ticks in one burst before anything else (a real driver might
//!   interleave them with input; `--no-pause-catch-up` shows what that does).
//! - Clients talk to one node at a time over links that never duplicate (as TCP would not);
//!   they do not retry `Resign`/`Transfer` with a reused session after completion (they
//!   revoke and start a new session instead, see [`client`]).
//! - Session expiry precision and fairness, performance, and overload (limits such as
//!   `uncommitted_entries_max` are exercised only incidentally).
//! - Node ids are small integers; the cluster never shrinks below `nodes − 1` voters.
#![deny(missing_docs)]

pub mod checkers;
pub mod cli;
pub mod client;
pub mod core_call;
pub mod disk;
pub mod driver;
pub mod explore;
pub mod faults;
pub mod hash;
pub mod history;
pub mod mirror;
pub mod model;
pub mod network;
pub mod observe;
pub mod options;
pub mod protocol;
pub mod queue;
pub mod report;
pub mod rng;
pub mod time;
pub mod trace;
pub mod world;

pub use options::{parse_seed_range, validate_nodes, InjectBug, SimOptions};

/// The core's bug switches, as the simulator hands them to its nodes: the core's
/// `InjectedBugs` in a build with the `inject-bugs` feature, nothing without it (a core bug
/// is then refused by [`SimOptions::validate`]).
#[cfg(feature = "inject-bugs")]
pub type CoreBugs = tenure_core::bugs::InjectedBugs;
/// The core's bug switches: none in a build without the `inject-bugs` feature.
#[cfg(not(feature = "inject-bugs"))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreBugs {}

/// A node from its configuration and disk, running with the core's bugs `bugs`.
pub fn new_node(
    config: tenure_core::config::Config,
    recovered: tenure_core::types::Recovered,
    bugs: CoreBugs,
) -> Result<tenure_core::node::Node, tenure_core::node::NodeError> {
    #[cfg(feature = "inject-bugs")]
    return tenure_core::node::Node::with_injected_bugs(config, recovered, bugs);
    #[cfg(not(feature = "inject-bugs"))]
    {
        let _ = bugs;
        tenure_core::node::Node::new(config, recovered)
    }
}
pub use report::{SeedReport, Stats, Violation};

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs one seed and reports what happened. Never panics: a panic inside the core is reported
/// as a `node-invariant` violation, any other panic as `simulator-panic`.
pub fn run_seed(opts: &SimOptions, seed: u64) -> SeedReport {
    core_call::reset();
    let outcome = catch_unwind(AssertUnwindSafe(|| world::World::new(opts, seed).run(seed)));
    match outcome {
        Ok(report) => report,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".to_string());
            let checker = if core_call::panicked_in_core() {
                "node-invariant"
            } else {
                "simulator-panic"
            };
            core_call::reset();
            // Replay the fault mix so the report can still print it.
            let fault_mix =
                faults::FaultMix::draw(&mut rng::SimRng::new(seed), opts.faults).describe();
            SeedReport {
                seed,
                trace_hash: 0,
                violations: vec![Violation {
                    checker,
                    time_us: 0,
                    detail: message,
                }],
                simulated_us: 0,
                stats: Stats::default(),
                fault_mix,
                trace: Vec::new(),
            }
        }
    }
}

/// The one-line command that reproduces `seed` with `opts`.
pub fn reproduce_command(opts: &SimOptions, seed: u64) -> String {
    let defaults = SimOptions::default();
    let mut cmd = format!("tenure sim --seed {seed} --nodes {}", opts.nodes);
    if opts.clients != defaults.clients {
        cmd.push_str(&format!(" --clients {}", opts.clients));
    }
    if opts.safety_ms != defaults.safety_ms {
        cmd.push_str(&format!(
            " --safety-secs {}",
            opts.safety_ms as f64 / 1000.0
        ));
    }
    if opts.liveness_ms != defaults.liveness_ms {
        cmd.push_str(&format!(
            " --liveness-secs {}",
            opts.liveness_ms as f64 / 1000.0
        ));
    }
    if !opts.faults {
        cmd.push_str(" --no-faults");
    }
    if !opts.pause_catch_up {
        cmd.push_str(" --no-pause-catch-up");
    }
    if let Some(bug) = opts.bug {
        cmd.push_str(&format!(" --inject-bug {bug}"));
    }
    cmd
}
