//! The trace: a running hash of every event, and optionally a readable log.
//!
//! Two runs of the same seed must produce the same trace hash; that is the determinism test.

use crate::hash::Fnv64;
use crate::time::{fmt_time, SimTimeUs};

/// Event kinds fed to the trace hash; the numbers are part of the stable encoding.
#[derive(Clone, Copy, Debug)]
#[repr(u64)]
pub enum TraceKind {
    /// A node ticked.
    Tick = 1,
    /// A Raft message was delivered.
    Deliver = 2,
    /// A client request reached a node.
    ClientRequest = 3,
    /// A reply reached a client.
    ClientReply = 4,
    /// A client timer fired.
    ClientTimer = 5,
    /// A fault was injected or healed.
    Fault = 6,
    /// A node's role or term changed.
    Role = 7,
    /// A client started or finished an operation.
    ClientOp = 8,
    /// A message was dropped, duplicated or delayed by the network.
    Network = 9,
    /// A node's Ready was processed.
    Ready = 10,
}

/// The running trace of one seed.
pub struct Trace {
    hash: Fnv64,
    lines: Option<Vec<String>>,
    /// Also keep per-message and per-commit lines (debugging the simulator or the core).
    detailed: bool,
}

impl Trace {
    /// A trace that keeps readable lines only if `readable` is set.
    pub fn new(readable: bool, detailed: bool) -> Trace {
        let readable = readable || detailed;
        Trace {
            hash: Fnv64::new(),
            lines: if readable { Some(Vec::new()) } else { None },
            detailed,
        }
    }

    /// Adds a detailed line (messages, commits), only kept with detailed tracing.
    pub fn detail(&mut self, now_us: SimTimeUs, line: impl FnOnce() -> String) {
        if self.detailed {
            self.log(now_us, line);
        }
    }

    /// Feeds one event into the hash.
    pub fn event(&mut self, kind: TraceKind, now_us: SimTimeUs, words: &[u64]) {
        self.hash.u64(kind as u64);
        self.hash.u64(now_us);
        for word in words {
            self.hash.u64(*word);
        }
    }

    /// True if readable lines are kept (so callers can skip formatting otherwise).
    pub fn readable(&self) -> bool {
        self.lines.is_some()
    }

    /// Adds a readable line; `line` is only called when the trace is readable.
    pub fn log(&mut self, now_us: SimTimeUs, line: impl FnOnce() -> String) {
        if let Some(lines) = self.lines.as_mut() {
            lines.push(format!("{} {}", fmt_time(now_us), line()));
        }
    }

    /// The hash so far.
    pub fn hash(&self) -> u64 {
        self.hash.finish()
    }

    /// Takes the readable lines (empty if not kept).
    pub fn take_lines(&mut self) -> Vec<String> {
        self.lines.take().unwrap_or_default()
    }
}
