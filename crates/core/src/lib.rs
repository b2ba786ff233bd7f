//! tenure-core: the pure, sans-IO heart of tenure.
//!
//! Raft consensus (private internals behind [`node::Node`]) and the replicated state
//! machine ([`sm`]) that serves sessions, elections with fencing tokens and fenced keys.
//! Messages in, effects out, time as ticks, randomness from a seed in the configuration.
//! No clock, no IO, no threads, no global state: see `tests/purity.rs`.
#![deny(missing_docs)]

/// `injected!(self.bugs.double_vote)`: whether a known bug is switched back on ([`bugs`]).
/// Without the `inject-bugs` feature it is the constant `false`, and the path it names is
/// never compiled.
#[cfg(feature = "inject-bugs")]
macro_rules! injected {
    ($($bug:tt)+) => {
        $($bug)+
    };
}
#[cfg(not(feature = "inject-bugs"))]
macro_rules! injected {
    ($($bug:tt)+) => {
        $crate::bugs::off(stringify!($($bug)+))
    };
}

#[cfg(feature = "inject-bugs")]
pub mod bugs;
/// Without the `inject-bugs` feature there is nothing to switch on: the nodes and state
/// machines carry this empty value where a build with the feature carries its switches.
#[cfg(not(feature = "inject-bugs"))]
mod bugs {
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub(crate) struct InjectedBugs {}

    /// Every switch is off. Named by the switch (`injected!(self.bugs.double_vote)` is
    /// `off("self.bugs.double_vote")`), so that two switches read in one `if … else if` are
    /// not the same condition to the linter; the compiler folds the call away.
    #[inline(always)]
    pub(crate) const fn off(_bug: &str) -> bool {
        false
    }
}
pub mod config;
pub mod drift;
pub mod event;
pub mod generation;
mod lease;
pub mod log;
pub mod message;
pub mod node;
pub mod quorum;
mod raft;
pub mod read;
pub mod sm;
pub mod storage;
pub mod types;
