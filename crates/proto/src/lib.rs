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

/// Length of a session secret (`GrantResponse.session_secret`): 128 bits.
pub const SESSION_SECRET_BYTES: usize = 16;

/// A new session secret: [`SESSION_SECRET_BYTES`] from the operating system's CSPRNG.
pub fn new_session_secret() -> Result<Vec<u8>, String> {
    let mut secret = vec![0u8; SESSION_SECRET_BYTES];
    getrandom::getrandom(&mut secret).map_err(|e| format!("the OS random source failed: {e}"))?;
    Ok(secret)
}

/// One secret for every session a tool process is granted (the bench, the nemesis, test
/// harnesses: each holds all of its own sessions), drawn once.
///
/// # Panics
///
/// If the operating system's random source fails.
pub fn process_session_secret() -> Vec<u8> {
    static SECRET: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SECRET
        .get_or_init(|| new_session_secret().expect("a session secret"))
        .clone()
}
