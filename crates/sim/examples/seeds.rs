//! The simulator over a range of seeds, built without the rest of the product: what
//! `scripts/mutants.py --by sim` runs in a mutated copy of the tree, where rebuilding the
//! whole `tenure` binary for each mutant would take minutes. `tenure sim` is the command for
//! everyone else (same runs, same verdicts, reproducible commands).
//!
//!     cargo run -p tenure-sim --example seeds -- 1..2001 5
//!
//! Prints the first violating seed and its checker, and exits 1; exits 0 if every seed
//! passes every checker.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use tenure_sim::{parse_seed_range, reproduce_command, run_seed, SimOptions};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(range), Some(nodes)) = (args.first(), args.get(1)) else {
        eprintln!("usage: seeds A..B NODES");
        return ExitCode::from(2);
    };
    let seeds = match parse_seed_range(range) {
        Ok(seeds) => seeds,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let opts = SimOptions {
        nodes: nodes.parse().unwrap_or(5),
        ..SimOptions::default()
    };
    let next = AtomicU64::new(seeds.start);
    let stop = AtomicBool::new(false);
    let first: Mutex<Option<(u64, String)>> = Mutex::new(None);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds.end {
                        return;
                    }
                    let report = run_seed(&opts, seed);
                    if let Some(v) = report.violations.first() {
                        stop.store(true, Ordering::Relaxed);
                        let mut first = first.lock().unwrap_or_else(|p| p.into_inner());
                        if first.as_ref().is_none_or(|(s, _)| seed < *s) {
                            *first = Some((seed, format!("{}: {}", v.checker, v.detail)));
                        }
                    }
                }
            });
        }
    });
    match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((seed, what)) => {
            let what: String = what.chars().take(300).collect();
            println!("seed {seed}: {what}");
            println!("reproduce: {}", reproduce_command(&opts, seed));
            ExitCode::from(1)
        }
        None => {
            println!("{} seeds, no violation", seeds.end - seeds.start);
            ExitCode::SUCCESS
        }
    }
}
