//! The client's typed errors, and their translation from the cluster's gRPC statuses.

use tenure_core::sm::SmError;
use tenure_proto::{Reason, CURRENT_TOKEN_KEY, LEADER_ADDR_KEY};
use tonic::Status;

/// The result of every fallible call of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong when talking to a backend.
///
/// Retryable conditions ([`Error::NotLeader`], [`Error::Unavailable`]) are retried inside the
/// client for a bounded time before they surface; the others are answers, not accidents.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The node asked is not the coordination cluster's leader, and retrying along its hints
    /// did not reach one in time.
    #[error("not the cluster leader ({})", leader_hint_text(leader_hint.as_deref()))]
    NotLeader {
        /// The client address of the node believed to lead, when known.
        leader_hint: Option<String>,
    },
    /// No node answered usefully in time (no leader yet, nodes down, overload).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The request may or may not have taken effect, and retrying it (with the same request
    /// id, across nodes and leader changes) did not learn which within the client's budget.
    /// Retrying the same call later is safe: the cluster applies a request at most once.
    #[error("outcome unknown: {0}")]
    Indeterminate(String),
    /// The request's session has ended (expired or revoked), and with it what the cluster
    /// remembered of its requests: whether this request (an earlier attempt of it) took effect
    /// before the session ended is unknown, as with [`Error::Indeterminate`]. Retrying does
    /// not help, and the session is gone either way.
    #[error("session ended, outcome unknown: {0}")]
    SessionEnded(String),
    /// A fenced write carried a token lower than one already accepted, or (on the cluster)
    /// lower than its election's current token: a newer leader exists.
    #[error("stale token: the current token is {current}")]
    StaleToken {
        /// The highest token the store has accepted, or the election's current token.
        current: u64,
    },
    /// A fenced write named another election than the one the key belongs to.
    #[error("wrong election: {0}")]
    WrongElection(String),
    /// A fenced write carried a token its election never handed out (higher than the
    /// latest it issued): not a leader's token at all.
    #[error("token not issued: {0}")]
    TokenNotIssued(String),
    /// The backend refused the request as not this client's to make: a tenure session's
    /// secret did not match or the cluster's policy grants this principal no such right,
    /// the etcd user's roles do not cover the keys, a ZooKeeper ACL does
    /// not admit this client's identity (another digest user, or none).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The backend refused this client's credentials: a wrong user name or password, a
    /// bearer token or client certificate the tenure cluster does not know, none given where
    /// the backend requires them, or a connection its rules do not admit
    /// (PostgreSQL's `pg_hba.conf`: say, plaintext where only TLS is allowed). Never
    /// retried: the same credentials will be refused again.
    #[error("authentication failed: {0}")]
    AuthenticationFailed(String),
    /// TLS with the backend could not be set up: its certificate is not signed by the CA
    /// given, does not name the host dialed or has expired, or the server does not speak TLS
    /// (or only TLS). Never retried: it is a matter of configuration.
    #[error("TLS with the backend failed: {0}")]
    Tls(String),
    /// The session (lease) behind a candidacy or leadership expired or was revoked.
    #[error("the session expired or was revoked")]
    SessionLost,
    /// Nobody ever campaigned in this election.
    #[error("unknown election {0:?}")]
    UnknownElection(String),
    /// The session named is not queued in the election (or does not lead it).
    #[error("not a candidate: {0}")]
    NotCandidate(String),
    /// The request was malformed or out of range (sizes, TTL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The caller's principal holds all it may of something (sessions, elections, keys,
    /// key bytes, streams, requests per second; the message names which): end some of its
    /// own, or ask the operator for a larger quota. Other principals are not affected.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// The election still has candidates, so it cannot be deleted.
    #[error("election in use: {0}")]
    ElectionInUse(String),
    /// The URL names a backend this build does not support (yet).
    #[error("unsupported backend {scheme:?}: {why}")]
    UnsupportedBackend {
        /// The URL's scheme.
        scheme: String,
        /// What to do instead.
        why: String,
    },
    /// The URL could not be understood.
    #[error("invalid backend URL {url:?}: {why}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// Any other error the backend reported.
    #[error("backend error: {0}")]
    Backend(String),
}

/// The not-leader hint as words: the address, or that it is unknown (never Rust's
/// `Some("…")`, which is what people and scripts read otherwise).
fn leader_hint_text(hint: Option<&str>) -> String {
    match hint {
        Some(addr) => format!("the leader's client address is {addr}"),
        None => "the leader is unknown".into(),
    }
}

impl Error {
    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::NotLeader { .. } | Error::Unavailable(_) | Error::Indeterminate(_)
        )
    }
}

impl Error {
    /// The reason of the cluster's list ([`Reason`]) this error stands for, when it stands
    /// for one: what the operator commands print next to the message. `None` for the
    /// client's own errors (URLs, TLS, other backends' failures).
    pub fn reason(&self) -> Option<Reason> {
        Some(match self {
            Error::NotLeader { .. } => Reason::NotLeader,
            Error::Unavailable(_) => Reason::Unavailable,
            Error::Indeterminate(_) => Reason::Indeterminate,
            Error::SessionEnded(_) => Reason::SessionEnded,
            Error::StaleToken { .. } => Reason::StaleToken,
            Error::WrongElection(_) => Reason::WrongElection,
            Error::TokenNotIssued(_) => Reason::TokenNotIssued,
            Error::PermissionDenied(_) => Reason::PermissionDenied,
            Error::AuthenticationFailed(_) => Reason::Unauthenticated,
            Error::SessionLost => Reason::UnknownSession,
            Error::UnknownElection(_) => Reason::UnknownElection,
            Error::NotCandidate(_) => Reason::NotCandidate,
            Error::InvalidArgument(_) => Reason::InvalidArgument,
            Error::QuotaExceeded(_) => Reason::QuotaExceeded,
            Error::ElectionInUse(_) => Reason::ElectionInUse,
            Error::Tls(_)
            | Error::UnsupportedBackend { .. }
            | Error::InvalidUrl { .. }
            | Error::Backend(_) => return None,
        })
    }
}

fn meta(s: &Status, key: &str) -> Option<String> {
    s.metadata()
        .get(key)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

impl From<Status> for Error {
    fn from(s: Status) -> Error {
        let message = s.message().to_string();
        let Some(reason) = Reason::of(&s) else {
            return match s.code() {
                tonic::Code::InvalidArgument => Error::InvalidArgument(message),
                tonic::Code::Unauthenticated => Error::AuthenticationFailed(message),
                tonic::Code::PermissionDenied => Error::PermissionDenied(message),
                tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled
                | tonic::Code::Unknown => Error::Unavailable(format!("{:?}: {message}", s.code())),
                code => Error::Backend(format!("{code:?}: {message}")),
            };
        };
        match reason {
            Reason::NotLeader => Error::NotLeader {
                leader_hint: meta(&s, LEADER_ADDR_KEY),
            },
            Reason::UnknownSession => Error::SessionLost,
            Reason::UnknownElection => Error::UnknownElection(message),
            Reason::NotCandidate => Error::NotCandidate(message),
            Reason::WrongElection => Error::WrongElection(message),
            Reason::TokenNotIssued => Error::TokenNotIssued(message),
            Reason::WrongSecret | Reason::PermissionDenied => Error::PermissionDenied(message),
            Reason::Unauthenticated => Error::AuthenticationFailed(message),
            Reason::StaleToken | Reason::TokenSuperseded => {
                match meta(&s, CURRENT_TOKEN_KEY).and_then(|t| t.parse().ok()) {
                    Some(current) => Error::StaleToken { current },
                    None => Error::Backend(format!("{reason} without a current token: {message}")),
                }
            }
            Reason::InvalidArgument => Error::InvalidArgument(message),
            Reason::Unavailable => Error::Unavailable(message),
            // Every stream slot is taken: the node's answer, not a retry's business.
            Reason::ResourceExhausted => Error::Backend(format!("{reason}: {message}")),
            Reason::QuotaExceeded => Error::QuotaExceeded(message),
            Reason::ElectionInUse => Error::ElectionInUse(message),
            Reason::Indeterminate | Reason::RequestForgotten => Error::Indeterminate(message),
            Reason::SessionEnded => Error::SessionEnded(message),
        }
    }
}

impl From<SmError> for Error {
    /// The state machine's refusal as the cluster would report it (the `memory:` backend
    /// runs the same state machine in-process).
    fn from(e: SmError) -> Error {
        let message = e.to_string();
        match e {
            SmError::UnknownSession(_) => Error::SessionLost,
            SmError::UnknownElection(name) => Error::UnknownElection(name),
            SmError::NotCandidate { .. } | SmError::NotLeader { .. } => {
                Error::NotCandidate(message)
            }
            SmError::StaleToken { current, .. } | SmError::TokenSuperseded { current, .. } => {
                Error::StaleToken { current }
            }
            SmError::TokenNotIssued { .. } => Error::TokenNotIssued(message),
            SmError::WrongElection { .. } => Error::WrongElection(message),
            SmError::WrongSecret(_) | SmError::NotOwner(_) => Error::PermissionDenied(message),
            SmError::QuotaExceeded { definite: true, .. } => Error::QuotaExceeded(message),
            SmError::QuotaExceeded {
                definite: false, ..
            } => Error::Indeterminate(message),
            SmError::ElectionInUse { .. } => Error::ElectionInUse(message),
            SmError::RequestForgotten { .. } => Error::Indeterminate(message),
            SmError::SessionEnded { .. } => Error::SessionEnded(message),
            SmError::TtlOutOfRange { .. }
            | SmError::BadSize { .. }
            | SmError::BadRequestId(_)
            | SmError::TooManyCandidates(_) => Error::InvalidArgument(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn not_leader_names_the_hint_as_an_address_or_unknown() {
        let known = Error::NotLeader {
            leader_hint: Some("127.0.0.1:8002".into()),
        };
        assert_eq!(
            known.to_string(),
            "not the cluster leader (the leader's client address is 127.0.0.1:8002)"
        );
        let unknown = Error::NotLeader { leader_hint: None };
        assert_eq!(
            unknown.to_string(),
            "not the cluster leader (the leader is unknown)"
        );
        for e in [known, unknown] {
            assert!(!e.to_string().contains("Some("), "{e}");
        }
    }
}
