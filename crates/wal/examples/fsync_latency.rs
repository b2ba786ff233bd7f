//! How long one durable persist of a one-entry batch takes on this machine: write plus
//! `fdatasync`, the wait every Ready pays before its messages leave.
//!
//! ```text
//! cargo run --release -p tenure-wal --example fsync_latency -- [DIR] [--count N]
//! ```
//!
//! The log goes in a temporary directory under `DIR` (default: the current directory),
//! removed at the end. `DIR` should be on the disk the server will use: a tmpfs makes fsync free and the numbers meaningless.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tenure_core::sm::Command;
use tenure_core::storage::Storage;
use tenure_core::types::{Entry, HardState, Payload};
use tenure_wal::{FileStorage, WalOptions};

fn main() -> anyhow::Result<()> {
    let mut dir: Option<PathBuf> = None;
    let mut count: usize = 2000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--count" => {
                count = args
                    .next()
                    .context("--count needs a number")?
                    .parse()
                    .context("--count needs a number")?;
            }
            "-h" | "--help" => {
                println!("usage: fsync_latency [DIR] [--count N]");
                return Ok(());
            }
            other if dir.is_none() && !other.starts_with('-') => dir = Some(other.into()),
            other => bail!("unexpected argument {other:?}; usage: fsync_latency [DIR] [--count N]"),
        }
    }
    if count == 0 {
        bail!("--count must be at least 1");
    }

    // A fresh log in a temporary directory under DIR, removed at the end.
    let parent = dir.unwrap_or_else(|| PathBuf::from("."));
    let temporary = tempfile::tempdir_in(&parent)
        .with_context(|| format!("create a temporary directory in {}", parent.display()))?;
    let dir = temporary.path().to_path_buf();
    let mut storage = FileStorage::open(&dir, WalOptions::default())?;

    // A typical one-entry batch: a campaign with a small value, and the commit index moving.
    let mut latencies = Vec::with_capacity(count);
    for i in 1..=count as u64 {
        let entry = Entry {
            term: 1,
            index: i,
            payload: Payload::Command(Command::Campaign {
                election: "nightly-billing".into(),
                session: 42,
                value: b"10.0.0.7:7000".to_vec(),
            }),
        };
        let hs = HardState {
            term: 1,
            vote: Some(1),
            commit: i - 1,
        };
        let started = Instant::now();
        storage.persist(Some(&hs), None, &[entry])?;
        latencies.push(started.elapsed());
    }
    let stats = storage.fsync_stats();
    drop(storage);

    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "persist (write + fdatasync) of a 1-entry batch, {count} runs in {}",
        dir.display()
    );
    println!("  median {:>9.1} µs", micros(at(0.5)));
    println!("  p99    {:>9.1} µs", micros(at(0.99)));
    println!("  max    {:>9.1} µs", micros(at(1.0)));
    println!(
        "  fdatasync alone: mean {:.1} µs, max {:.1} µs over {} calls, {} bytes written",
        micros(stats.total) / stats.count.max(1) as f64,
        micros(stats.max),
        stats.count,
        stats.bytes_written
    );
    if dir.starts_with("/dev/shm") {
        eprintln!(
            "warning: {} looks like a tmpfs; fsync costs nothing there",
            dir.display()
        );
    }
    Ok(())
}
