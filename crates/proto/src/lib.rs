//! tenure's client API as gRPC (package `tenure.v1`), generated from
//! `proto/tenure/v1/tenure.proto` at build time.
//!
//! Errors travel as gRPC statuses with a machine-readable reason in the `tenure-error`
//! metadata key; see the comment at the top of the `.proto` file.

/// Generated messages, clients and servers of `tenure.v1`.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("tenure.v1");
}

/// Metadata key carrying the machine-readable error reason.
pub const ERROR_KEY: &str = "tenure-error";
/// Metadata key carrying the leader's node id on `not-leader`.
pub const LEADER_ID_KEY: &str = "tenure-leader-id";
/// Metadata key carrying the leader's client address on `not-leader`.
pub const LEADER_ADDR_KEY: &str = "tenure-leader-addr";
/// Metadata key carrying the highest accepted token on `stale-token`.
pub const CURRENT_TOKEN_KEY: &str = "tenure-current-token";
