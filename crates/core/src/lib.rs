//! tenure-core: the pure, sans-IO heart of tenure.
//!
//! Raft consensus (private internals behind [`node::Node`]) and the replicated state
//! machine ([`sm`]) that serves sessions, elections with fencing tokens and fenced keys.
//! Messages in, effects out, time as ticks, randomness from a seed in the configuration.
//! No clock, no IO, no threads, no global state: see `tests/purity.rs`.
#![deny(missing_docs)]

pub mod config;
pub mod drift;
pub mod event;
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
