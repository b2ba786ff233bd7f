//! Scans seeds with the simulator's default phases, in parallel, the way `tenure sim` does
//! (without the CLI's heavy dependencies): `scan BUG|none FROM TO [THREADS]`. With a bug it
//! stops at the first seed that a checker catches and prints the seed and checker; without,
//! it runs every seed and prints the violations, wall time and the compression ratio.
//! `SCAN_SAFETY_MS` and `SCAN_LIVENESS_MS` override the phase lengths.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tenure_sim::{reproduce_command, run_seed, InjectBug, SimOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bug = match args.get(1).map(String::as_str) {
        None | Some("none") => None,
        Some(name) => Some(InjectBug::from_name(name).expect("a bug name")),
    };
    let from: u64 = args.get(2).map_or(1, |s| s.parse().expect("seed"));
    let to: u64 = args.get(3).map_or(2001, |s| s.parse().expect("seed"));
    let threads: usize = args.get(4).map_or(2, |s| s.parse().expect("threads"));
    // SCAN_SAFETY_MS / SCAN_LIVENESS_MS override the phase lengths (the tests' are 5000/3000).
    let env_ms = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .map_or(default, |v| v.parse().expect("milliseconds"))
    };
    let defaults = SimOptions::default();
    let opts = SimOptions {
        bug,
        safety_ms: env_ms("SCAN_SAFETY_MS", defaults.safety_ms),
        liveness_ms: env_ms("SCAN_LIVENESS_MS", defaults.liveness_ms),
        ..defaults
    };
    let next = AtomicU64::new(from);
    let stop = AtomicBool::new(false);
    let found: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let simulated = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= to {
                    break;
                }
                let report = run_seed(&opts, seed);
                simulated.fetch_add(report.simulated_us, Ordering::Relaxed);
                if !report.passed() {
                    let v: Vec<String> = report.violations.iter().map(|v| v.to_string()).collect();
                    found
                        .lock()
                        .expect("no panics")
                        .push((seed, format!("{} | {}", v.join("; "), report.fault_mix)));
                    if bug.is_some() {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let wall = start.elapsed().as_secs_f64();
    let mut found = found.into_inner().expect("no panics");
    found.sort();
    let sim_s = simulated.load(Ordering::Relaxed) as f64 / 1e6;
    println!(
        "bug {:?}: {} violating seeds; wall {wall:.1}s; simulated {sim_s:.0}s; compression {:.0}x (per core {:.0}x)",
        bug.map(|b| b.name()),
        found.len(),
        sim_s / wall,
        sim_s / wall / threads as f64
    );
    for (seed, what) in found.iter().take(10) {
        println!(
            "  seed {seed}: {what}\n    {}",
            reproduce_command(&opts, *seed)
        );
    }
}
