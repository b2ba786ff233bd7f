//! The one harness of the real-process tests (the server's, the client library's contract,
//! the CLI's): it starts `tenure server` child processes
//! on loopback ports with a temporary data directory each, signals them (SIGKILL, SIGSTOP,
//! SIGCONT, SIGTERM), reads their HTTP `/status` and `/metrics`, and talks to them over the
//! gRPC API. Every wait has a deadline; dropping a [`Cluster`] kills every node it started.
//!
//! **Which binary.** Tests outside `tenure-cli` cannot use `CARGO_BIN_EXE_tenure` (the binary
//! belongs to `tenure-cli`), so the harness uses `<target>/<profile>/tenure` next to the test
//! binary itself. If that file is older than any source that goes into it (or missing), the
//! harness first runs `cargo build -p tenure-cli --bin tenure` into the same target directory
//! and profile; on a clean clone the first test pays for that build. `cargo test --workspace`
//! and `cargo nextest run --workspace` build the binary themselves (`tenure-cli` has
//! integration tests), so there the harness finds it fresh and builds nothing: a build would
//! re-link the file while `tenure-cli`'s tests may be starting it. Set
//! `TENURE_BIN=/path/to/tenure` to test a given binary without any of this.
//!
//! **One cluster at a time.** The tests are timing-sensitive (150 ms election timeouts) and
//! the machine may have two cores, so a cluster takes an exclusive `flock` on a file in the
//! temporary directory for its lifetime. That serializes clusters across the threads of
//! `cargo test` and across the processes of `cargo nextest` alike.
//!
//! **TLS by default.** Every cluster runs with TLS on (certificates issued into its
//! temporary directory, as `tenure certs` does): mutual TLS between peers, the gRPC and
//! HTTP ports over TLS, and this harness's channels and HTTP client verifying the cluster's
//! CA. `Options::plaintext()` turns it off for the tests that need raw plaintext access.
//!
//! **Debugging.** When a test panics, the tail of every node's log is printed. Set
//! `TENURE_KEEP_TEST_DIRS=1` to keep the data directories and full logs.

//!
//! **Layout.** The processes themselves are `tenure-procs`'s (node specifications, ports,
//! spawning, signals, `/status`); this crate adds what tests need on top, a module each:
//! [`binary`] (which `tenure` to run), [`cluster`] (a cluster of nodes and its checks),
//! [`auth`] (auth files), [`grpc`] (calls, retries, error assertions, keepalive streams),
//! [`workload`] (writers under operations), [`proxy`] (a TCP proxy that cuts connections),
//! [`raw`] (raw connections and frame checksums for attack tests) and [`lock`] (one
//! cluster at a time).

pub mod auth;
pub mod binary;
pub mod cluster;
pub mod grpc;
pub mod lock;
pub mod proxy;
pub mod raw;
pub mod services;
pub mod workload;

use std::time::Duration;

pub use auth::AuthFile;
pub use binary::{outcome, server_refusing_to_start, tenure_binary};
pub use cluster::{ClientTls, Cluster, Options, ADMIN_CLIENT, APP_CLIENT};
pub use grpc::{
    assert_error, campaign_in_background, missing_keys, reason, who_leads, Call, CallFuture,
    Caller, Client, ExpectedReason, KeepAlives,
};
pub use lock::ClusterLock;
pub use proxy::Proxy;
pub use raw::{closed_within, connect_from, crc32c};
/// The timing profile every test uses: the server's defaults.
pub use tenure_core::config::timing::{ELECTION_TIMEOUT_MS, HEARTBEAT_MS, TICK_MS};
pub use tenure_procs::status::metric_value;
pub use tenure_procs::{free_ports, NodeAddrs, NodeStatus};
pub use tenure_proto::Reason;
pub use tenure_transport::http::HttpClient;
pub use workload::{KeyValue, Writers};

/// The cluster id the CLI uses by default; raw peer frames must present it.
pub const CLUSTER_ID: &str = "tenure";

/// The secret of every session the harness's clients are granted: requests acting for a
/// session must present it.
pub fn secret() -> Vec<u8> {
    tenure_proto::process_session_secret()
}

/// Shorthand for durations in tests.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Shorthand for durations in tests.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
