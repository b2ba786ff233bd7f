//! The bounded model checker (`tenure_sim::explore`) from the command line: the suite's
//! bound by default, deeper with `--depth N` (and more of everything with `--deep`).
//!
//!     cargo run --release -p tenure-sim --example model -- --depth 14
//!
//! Prints the states explored, the depth and the time, or the first violation with the
//! choices that lead to it (exit status 1).

use std::process::ExitCode;

use tenure_sim::explore::{explore, Bounds};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut bounds = Bounds::suite();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--depth" => {
                bounds.depth = args
                    .get(i + 1)
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(bounds.depth);
                i += 1;
            }
            "--max-states" => {
                bounds.max_states = args
                    .get(i + 1)
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(bounds.max_states);
                i += 1;
            }
            "--deep" => {
                bounds.crashes = 2;
                bounds.client_ops = 6;
                bounds.duplicates = 1;
                bounds.losses = 2;
                bounds.max_states = 20_000_000;
            }
            other => {
                eprintln!("unknown argument {other}; usage: model [--depth N] [--deep]");
                return ExitCode::from(2);
            }
        }
        i += 1;
    }
    let report = explore(&bounds, Default::default());
    println!(
        "{} distinct states, {} transitions, depth {}{} in {:.1} s ({bounds:?})",
        report.states,
        report.transitions,
        report.depth,
        if report.truncated {
            " (cut at max_states)"
        } else {
            ""
        },
        report.took.as_secs_f64(),
    );
    match report.violation {
        Some((why, path)) => {
            println!("path: {}", path.join(" → "));
            println!("violation: {why}");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    }
}
