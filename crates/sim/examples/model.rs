//! The bounded model checker (`tenure_sim::explore`) from the command line: the suite's two
//! bounds by default (the general one, then fast election's), one of them with `--general`
//! or `--fast-election`, deeper with `--depth N` (and more of everything with `--deep`).
//!
//!     cargo run --release -p tenure-sim --example model -- --general --depth 14
//!
//! Prints the states explored, the depth and the time, or the first violation with the
//! choices that lead to it (exit status 1).

use std::process::ExitCode;

use tenure_sim::explore::{explore, Bounds};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let runs = match (has("--general"), has("--fast-election")) {
        (true, false) => vec![Bounds::suite()],
        (false, true) => vec![Bounds::fast_election()],
        _ => vec![Bounds::suite(), Bounds::fast_election()],
    };
    let mut status = ExitCode::SUCCESS;
    for mut bounds in runs {
        if let Err(code) = tune(&mut bounds, &args) {
            return code;
        }
        if !run(&bounds) {
            status = ExitCode::from(1);
            break;
        }
    }
    status
}

/// Applies `--depth`, `--max-states` and `--deep` to `bounds`.
fn tune(bounds: &mut Bounds, args: &[String]) -> Result<(), ExitCode> {
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--general" | "--fast-election" => {}
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
                eprintln!(
                    "unknown argument {other}; usage: model [--general | --fast-election] \
                     [--depth N] [--max-states N] [--deep]"
                );
                return Err(ExitCode::from(2));
            }
        }
        i += 1;
    }
    Ok(())
}

/// One search; false if it found a violation.
fn run(bounds: &Bounds) -> bool {
    let report = explore(bounds, Default::default());
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
            false
        }
        None => true,
    }
}
