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

/// The machine-readable reason a failed call carries in [`ERROR_KEY`]: the one list of
/// them, printed and parsed here and nowhere else (see the top of the `.proto` file for
/// what each means and which gRPC code goes with it).
///
/// Every reason but [`Reason::Indeterminate`], [`Reason::RequestForgotten`] and
/// [`Reason::SessionEnded`] is definite: the command did not take effect and never will.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Not the Raft leader; `tenure-leader-id`/`tenure-leader-addr` name it when known.
    NotLeader,
    /// No leader yet, a transfer in progress, overloaded, shutting down: retry.
    Unavailable,
    /// A size or range out of bounds, a malformed id.
    InvalidArgument,
    /// The command may or may not have taken effect.
    Indeterminate,
    /// The session expired, was revoked or never existed.
    UnknownSession,
    /// No such election.
    UnknownElection,
    /// The session is not a candidate (or not the leader) of the election.
    NotCandidate,
    /// A write with a token lower than the highest accepted one for its key.
    StaleToken,
    /// The election has a newer leader than the token's.
    TokenSuperseded,
    /// A token the election has not issued.
    TokenNotIssued,
    /// The key belongs to another election.
    WrongElection,
    /// A retry older than every result its session still remembers: outcome unknown.
    RequestForgotten,
    /// A request with a request id on a session that has ended: what the session remembered
    /// went with it, so whether an earlier attempt took effect is unknown.
    SessionEnded,
    /// The session secret presented does not match the session's.
    WrongSecret,
    /// No credentials that prove who the caller is.
    Unauthenticated,
    /// The caller may not do this.
    PermissionDenied,
    /// Every slot of a bounded resource (streams) is taken.
    ResourceExhausted,
    /// The caller's principal holds all its share of a resource (its quota); others may
    /// still have room.
    QuotaExceeded,
    /// The election still has candidates, so it cannot be deleted.
    ElectionInUse,
}

impl Reason {
    /// Every reason, in the order of the `.proto` file's list.
    pub const ALL: [Reason; 19] = [
        Reason::NotLeader,
        Reason::Unavailable,
        Reason::InvalidArgument,
        Reason::Indeterminate,
        Reason::UnknownSession,
        Reason::UnknownElection,
        Reason::NotCandidate,
        Reason::StaleToken,
        Reason::TokenSuperseded,
        Reason::TokenNotIssued,
        Reason::WrongElection,
        Reason::RequestForgotten,
        Reason::SessionEnded,
        Reason::WrongSecret,
        Reason::Unauthenticated,
        Reason::PermissionDenied,
        Reason::ResourceExhausted,
        Reason::QuotaExceeded,
        Reason::ElectionInUse,
    ];

    /// The reason as it travels in [`ERROR_KEY`].
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::NotLeader => "not-leader",
            Reason::Unavailable => "unavailable",
            Reason::InvalidArgument => "invalid-argument",
            Reason::Indeterminate => "indeterminate",
            Reason::UnknownSession => "unknown-session",
            Reason::UnknownElection => "unknown-election",
            Reason::NotCandidate => "not-candidate",
            Reason::StaleToken => "stale-token",
            Reason::TokenSuperseded => "token-superseded",
            Reason::TokenNotIssued => "token-not-issued",
            Reason::WrongElection => "wrong-election",
            Reason::RequestForgotten => "request-forgotten",
            Reason::SessionEnded => "session-ended",
            Reason::WrongSecret => "wrong-secret",
            Reason::Unauthenticated => "unauthenticated",
            Reason::PermissionDenied => "permission-denied",
            Reason::ResourceExhausted => "resource-exhausted",
            Reason::QuotaExceeded => "quota-exceeded",
            Reason::ElectionInUse => "election-in-use",
        }
    }

    /// Whether a call that failed for this reason certainly did not take effect.
    pub const fn is_definite(self) -> bool {
        !matches!(
            self,
            Reason::Indeterminate | Reason::RequestForgotten | Reason::SessionEnded
        )
    }

    /// The reason a gRPC status carries, if any (`None` for a status without one, or with
    /// one this version does not know).
    pub fn of(status: &tonic::Status) -> Option<Reason> {
        status
            .metadata()
            .get(ERROR_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse().ok())
    }

    /// `status` labelled with this reason in [`ERROR_KEY`].
    pub fn label(self, mut status: tonic::Status) -> tonic::Status {
        status.metadata_mut().insert(
            ERROR_KEY,
            tonic::metadata::MetadataValue::from_static(self.as_str()),
        );
        status
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason string this version does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownReason(pub String);

impl std::fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown error reason {:?}", self.0)
    }
}

impl std::error::Error for UnknownReason {}

impl std::str::FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(s: &str) -> Result<Reason, UnknownReason> {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_parses_back_and_the_strings_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
            assert!(seen.insert(r.as_str()), "{r} twice");
        }
        assert_eq!(
            "no-such-reason".parse::<Reason>(),
            Err(UnknownReason("no-such-reason".into()))
        );
    }

    #[test]
    fn every_reason_is_documented_in_the_proto_file() {
        let proto = include_str!("../proto/tenure/v1/tenure.proto");
        for r in Reason::ALL {
            assert!(
                proto.contains(&format!("//   {}", r.as_str())),
                "{r} is not in the .proto file's list of reasons"
            );
        }
    }

    #[test]
    fn only_the_three_unknown_outcomes_are_indefinite() {
        let indefinite: Vec<_> = Reason::ALL
            .into_iter()
            .filter(|r| !r.is_definite())
            .collect();
        assert_eq!(
            indefinite,
            [
                Reason::Indeterminate,
                Reason::RequestForgotten,
                Reason::SessionEnded
            ]
        );
    }

    #[test]
    fn a_labelled_status_reads_back() {
        let s = Reason::StaleToken.label(tonic::Status::aborted("stale"));
        assert_eq!(Reason::of(&s), Some(Reason::StaleToken));
        assert_eq!(Reason::of(&tonic::Status::aborted("bare")), None);
    }
}
