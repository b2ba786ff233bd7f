//! tenure-procs: the one harness for clusters of real `tenure server` processes, shared by
//! the tests (`tenure-testkit`), the demo, the benchmarks and the nemesis.
//!
//! - [`node`]: a typed node specification ([`NodeSpec`]) that renders `tenure server`'s
//!   flags, with the default timing written once (in `tenure_core::config::timing`);
//! - [`ports`]: free loopback ports, by one rule (below the kernel's ephemeral range);
//! - [`process`]: a child process in its own process group that the kernel kills when its
//!   parent dies, its log appended to a file; signals, a pause that waits until every thread
//!   stopped, a graceful stop, resource readings;
//! - [`status`]: a node's `/status` and the wait for one agreed leader, over
//!   [`tenure_transport::http::HttpClient`];
//! - [`certs`]: a cluster's certificates and the client TLS built from them;
//! - [`flood`]: an anonymous TLS connection flood against client ports.
//!
//! Nothing here knows a test framework: errors are `anyhow` errors, and a harness that wants
//! a panic (the tests) unwraps them.
#![deny(missing_docs)]

pub mod certs;
pub mod flood;
pub mod node;
pub mod ports;
pub mod process;
pub mod status;

pub use certs::Certs;
pub use node::{NodeAddrs, NodeSpec, Timing};
pub use ports::free_ports;
pub use process::{signal, Proc};
pub use status::NodeStatus;
