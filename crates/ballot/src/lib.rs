//! tenure-ballot: the ballot on a page.
//!
//! A 3- or 5-node cluster of the real [`tenure_core::node::Node`], stepped by a person:
//! which node's clock ticks, which message is delivered or dropped, who is paused, crashed
//! or cut off. Each step reports terms, roles and votes, the quorum needed and a ballot log
//! in words ([`engine`]). Beside it, a model of the bully algorithm ([`bully`]) replays the
//! same steps, to show what a partition does to an algorithm without terms and majorities.
//! A scenario is a seed, a start ([`engine::Start`]: fresh, or established with node 1
//! leading term 41) and a step list ([`step`]), small enough for a URL, and replays exactly;
//! a prepared one can be taken one step at a time ([`engine::Engine::scenario`]). A step
//! that cannot be taken now says why and what would make it possible ([`step::Refusal`]),
//! and so does every ballot a node refuses. [`serve`] puts it all on one page.
//!
//! ```
//! use tenure_ballot::engine::Engine;
//! // Let 40 ticks pass: whoever times out first collects a majority and leads term 1.
//! let engine = Engine::replay(3, 7, "wait-40").unwrap();
//! let view = engine.view();
//! assert_eq!(view.nodes.iter().filter(|n| n.role == "leader").count(), 1);
//! ```
#![deny(missing_docs)]

pub mod bully;
pub mod cli;
pub mod engine;
pub mod scenarios;
pub mod serve;
pub mod step;

pub use step::{Result, Step, StepError};
