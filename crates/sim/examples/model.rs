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
    let mut runs = match (has("--general"), has("--fast-election")) {
        (true, false) => vec![Bounds::suite()],
        (false, true) => vec![Bounds::fast_election()],
        _ => vec![Bounds::suite(), Bounds::fast_election()],
    };
    if let Err(code) = tune(&mut runs, &args) {
        return code;
    }
    for bounds in &runs {
        if !run(bounds) {
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// Applies `--depth`, `--max-states` and `--deep` to every run's bounds.
fn tune(runs: &mut [Bounds], args: &[String]) -> Result<(), ExitCode> {
    let number = |i: usize| args.get(i + 1).and_then(|d| d.parse::<usize>().ok());
    let mut i = 0;
    while i < args.len() {
        for bounds in runs.iter_mut() {
            match args[i].as_str() {
                "--general" | "--fast-election" => {}
                "--depth" => bounds.depth = number(i).unwrap_or(bounds.depth),
                "--max-states" => bounds.max_states = number(i).unwrap_or(bounds.max_states),
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
        }
        i += if matches!(args[i].as_str(), "--depth" | "--max-states") {
            2
        } else {
            1
        };
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
