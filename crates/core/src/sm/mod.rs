//! The replicated state machine that tenure serves: sessions (leases), elections with
//! fencing tokens, and fenced keys.
//!
//! Pure and deterministic: the same sequence of `apply` calls on any replica produces the same
//! state, the same responses and the same events. Nothing here knows about time except as
//! tick counts carried *inside* commands; the node-local lease clock lives in
//! [`crate::node`], not here, because local clocks differ between replicas.

use serde::{Deserialize, Serialize};

use crate::types::Index;

/// A session's identity: the log index of the `Grant` entry that created it. Unique forever,
/// identical on every replica.
pub type SessionId = u64;

/// Identifies one client request, so that a retry of a command that was already applied
/// returns the original result instead of applying it again (Raft dissertation §6.3).
///
/// A client numbers the requests it makes on a session; the state machine remembers the
/// latest results per session (see [`SmLimits::results_per_session_max`]) and forgets them
/// with the session. A `Grant` has no session yet, so it carries a random nonce instead,
/// remembered for as long as the session it created lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RequestId {
    /// A command on an existing session.
    Session {
        /// The session the request is made on. For `Revoke`, `Campaign`, `Resign` and
        /// `Transfer` it must be the command's own session (`from` for a transfer).
        session: SessionId,
        /// The client's sequence number for this request on the session; non-zero.
        seq: u64,
    },
    /// A `Grant`.
    Grant {
        /// Chosen at random by the client for this grant; non-zero.
        nonce: u64,
    },
}

/// Limits that every replica must share (they are part of the cluster's configuration).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SmLimits {
    /// Shortest TTL a session may ask for, in ticks.
    pub ttl_min_ticks: u64,
    /// Longest TTL a session may ask for, in ticks.
    pub ttl_max_ticks: u64,
    /// Longest election name, in bytes.
    pub election_name_bytes_max: usize,
    /// Longest fenced key, in bytes.
    pub key_bytes_max: usize,
    /// Largest candidate value or fenced value, in bytes.
    pub value_bytes_max: usize,
    /// Most candidates queued in one election.
    pub candidates_per_election_max: usize,
    /// Results of requests remembered per session for retries (Raft dissertation §6.3); a
    /// retry of an older request than these is answered [`SmError::RequestForgotten`].
    /// Clients keep fewer requests than this in flight on one session.
    #[serde(default = "default_results_per_session_max")]
    pub results_per_session_max: usize,
}

fn default_results_per_session_max() -> usize {
    32
}

impl SmLimits {
    /// The one check of a command's sizes against the limits: TTLs within
    /// `[ttl_min_ticks, ttl_max_ticks]`, names and keys non-empty and at most their limit,
    /// values at most `value_bytes_max`, member addresses at most
    /// [`MemberAddresses::BYTES_MAX`] (peer and client ones non-empty). The leader runs it
    /// before a command takes space in the log (`Node::propose`, `Node::read`), and every
    /// replica again when it applies one, so an entry that breaks the limits is refused
    /// identically everywhere and changes nothing.
    pub fn check(&self, command: &Command) -> Result<(), SmError> {
        fn size(what: &'static str, len: usize, min: usize, max: usize) -> Result<(), SmError> {
            if len < min || len > max {
                return Err(SmError::BadSize {
                    what: what.to_string(),
                    len,
                    max,
                });
            }
            Ok(())
        }
        let election_name =
            |name: &str| size("election name", name.len(), 1, self.election_name_bytes_max);
        match command {
            Command::Grant { ttl_ticks } => {
                if !(self.ttl_min_ticks..=self.ttl_max_ticks).contains(ttl_ticks) {
                    return Err(SmError::TtlOutOfRange {
                        ttl_ticks: *ttl_ticks,
                        min: self.ttl_min_ticks,
                        max: self.ttl_max_ticks,
                    });
                }
            }
            Command::Campaign {
                election, value, ..
            } => {
                election_name(election)?;
                size("value", value.len(), 0, self.value_bytes_max)?;
            }
            Command::Resign { election, .. }
            | Command::Transfer { election, .. }
            | Command::Leader { election } => election_name(election)?,
            Command::FencedPut {
                key,
                value,
                election,
                ..
            } => {
                size("key", key.len(), 1, self.key_bytes_max)?;
                size("value", value.len(), 0, self.value_bytes_max)?;
                election_name(election)?;
            }
            Command::Get { key } => size("key", key.len(), 1, self.key_bytes_max)?,
            Command::DeleteElection { election } => election_name(election)?,
            Command::DeleteKey { key, election, .. } => {
                size("key", key.len(), 1, self.key_bytes_max)?;
                election_name(election)?;
            }
            Command::SetMember { addresses, .. } => {
                let max = MemberAddresses::BYTES_MAX;
                size("peer address", addresses.peer.len(), 1, max)?;
                size("client address", addresses.client.len(), 1, max)?;
                size("HTTP address", addresses.http.len(), 0, max)?;
            }
            Command::Revoke { .. }
            | Command::Expire { .. }
            | Command::Release { .. }
            | Command::Checkpoint { .. } => {}
            Command::Sealed { command, .. } => self.check(command)?,
            Command::Charged {
                principal, command, ..
            } => {
                size("principal", principal.len(), 1, PRINCIPAL_BYTES_MAX)?;
                self.check(command)?;
            }
        }
        Ok(())
    }
}

impl Default for SmLimits {
    fn default() -> SmLimits {
        SmLimits {
            ttl_min_ticks: 1,
            ttl_max_ticks: 1_000_000,
            election_name_bytes_max: 256,
            key_bytes_max: 256,
            value_bytes_max: 64 * 1024,
            candidates_per_election_max: 10_000,
            results_per_session_max: default_results_per_session_max(),
        }
    }
}

/// A command carried by a log entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Command {
    /// Create a session with the given TTL. The new session's id is the entry's index.
    Grant {
        /// Time to live in ticks, within `SmLimits` bounds.
        ttl_ticks: u64,
    },
    /// End a session at its holder's request, with everything bound to it.
    Revoke {
        /// The session to end.
        session: SessionId,
    },
    /// End a session whose keepalives stopped. Proposed only by the Raft leader, when its
    /// own lease clock says the session ran out.
    Expire {
        /// The session that ran out.
        session: SessionId,
    },
    /// Record, for every listed session, how many ticks it may still live counted from the
    /// moment a replica applies this entry. A new Raft leader honours these so that it neither
    /// expires a session early nor resets it to a full TTL.
    Checkpoint {
        /// `(session, remaining_ticks)` pairs. Unknown sessions are ignored.
        remaining: Vec<(SessionId, u64)>,
    },
    /// Join the FIFO queue of candidates of `election` with `session`.
    Campaign {
        /// Election name.
        election: String,
        /// The candidate's session; the candidacy ends with it.
        session: SessionId,
        /// Opaque value published while this candidate leads (e.g. its address).
        value: Vec<u8>,
    },
    /// Leave the queue of `election` (and hand leadership to the next if `session` led).
    Resign {
        /// Election name.
        election: String,
        /// The candidate leaving.
        session: SessionId,
    },
    /// Hand leadership of `election` from its current leader `from` to candidate `to`.
    Transfer {
        /// Election name.
        election: String,
        /// The current leader's session.
        from: SessionId,
        /// A queued candidate's session.
        to: SessionId,
    },
    /// Write `value` at `key` if `token` is not below the highest token accepted for `key`.
    FencedPut {
        /// Key.
        key: String,
        /// New value.
        value: Vec<u8>,
        /// The election whose token guards the write.
        election: String,
        /// The writer's fencing token.
        token: u64,
    },
    /// Read a fenced key (through the log, so linearizable).
    Get {
        /// Key.
        key: String,
    },
    /// Read who leads an election (through the log, so linearizable).
    Leader {
        /// Election name.
        election: String,
    },
    /// `command` presented with its session's secret (as a hash; the secret itself never
    /// enters the log). Around a `Grant`, the new session belongs to this secret; around a
    /// `Revoke`, `Campaign`, `Resign` or `Transfer`, the secret must match the session the
    /// command acts for. A session granted with a secret refuses those commands without it.
    Sealed {
        /// SHA-256 of the session's secret.
        secret_hash: SecretHash,
        /// The command.
        command: Box<Command>,
    },
    // Appended last, so that the encoding of the variants above is unchanged.
    /// Record where node `node` can be reached, so that every replica learns the addresses
    /// of a member added at run time from the log (and from snapshots) instead of from its
    /// static configuration. The core never interprets the strings; a later entry for the
    /// same node replaces the earlier one.
    SetMember {
        /// The node.
        node: crate::types::NodeId,
        /// Its contact points (peer, client and HTTP addresses, as the server defines them).
        addresses: MemberAddresses,
    },
    /// End a session whose holder let go of it: the KeepAlive stream the session was bound
    /// to (fate-sharing) was closed from the client's side, which the client library does
    /// only once its holder no longer believes in the session, or because its process
    /// exited. Proposed only by the Raft leader that saw the close, in the term the binding
    /// was made (docs/GUARANTEES.md "Fate-sharing sessions"); ends the session as `Revoke`
    /// and `Expire` do.
    Release {
        /// The session let go of.
        session: SessionId,
    },
    /// Remove an election that nobody campaigns in any more (no candidates, so no holder).
    /// Its latest token raises the state's token floor, so that an election created later
    /// under the same name starts above every token the removed one handed out
    /// (docs/GUARANTEES.md "Tokens across a delete"). Deleting an election that does not
    /// exist changes nothing and says so.
    DeleteElection {
        /// Election name.
        election: String,
    },
    /// Remove a fenced key, fenced like [`Command::FencedPut`]: only the current leader of
    /// the key's election (its latest token, not below the key's) may remove it.
    DeleteKey {
        /// Key.
        key: String,
        /// The election whose token guards the removal (the key's own, if it exists).
        election: String,
        /// The remover's fencing token.
        token: u64,
    },
    /// `command` made by `principal`, who may hold at most `quota`: the state machine
    /// records who owns each session, election and fenced key it creates, refuses what
    /// would take the principal over its quota, and refuses a command acting for a session
    /// that another principal owns. The API edge wraps every client command with the
    /// caller's principal and its quota from the auth file; commands without it (insecure
    /// mode, the leader's own `Expire`) are charged to nobody and bound by nothing.
    Charged {
        /// Who made the command (an auth-file principal name).
        principal: String,
        /// What that principal may hold in all.
        quota: Quota,
        /// The command.
        command: Box<Command>,
    },
}

/// The longest principal name a [`Command::Charged`] may carry.
pub const PRINCIPAL_BYTES_MAX: usize = 256;

/// What one principal may hold in the replicated state, carried by [`Command::Charged`]
/// (so every replica applies the same limits, whatever its local configuration says).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Quota {
    /// Live sessions it owns.
    pub sessions: u64,
    /// Elections it created (by campaigning first) that still exist.
    pub elections: u64,
    /// Fenced keys it wrote last.
    pub keys: u64,
    /// Bytes of those keys: each key's name plus its value.
    pub key_bytes: u64,
}

impl Quota {
    /// No limit at all.
    pub const UNLIMITED: Quota = Quota {
        sessions: u64::MAX,
        elections: u64::MAX,
        keys: u64::MAX,
        key_bytes: u64::MAX,
    };
}

/// What one principal holds in the replicated state (see [`Quota`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Live sessions it owns.
    pub sessions: u64,
    /// Elections it created that still exist.
    pub elections: u64,
    /// Fenced keys it wrote last.
    pub keys: u64,
    /// Bytes of those keys (name plus value).
    pub key_bytes: u64,
}

/// Where a node can be reached, as recorded by [`Command::SetMember`]. Opaque to the core:
/// the server stores `host:port` strings. Each is at most
/// [`MemberAddresses::BYTES_MAX`] bytes; `peer` and `client` are never empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemberAddresses {
    /// Where peers dial it (Raft traffic).
    pub peer: String,
    /// Where clients reach it (the client API).
    pub client: String,
    /// Its HTTP endpoint (metrics, health, dashboard); empty for none.
    pub http: String,
}

impl MemberAddresses {
    /// The longest address string accepted.
    pub const BYTES_MAX: usize = 255;
}

/// The hash of a session secret as the state machine stores and compares it (the API edge
/// computes it: SHA-256 of 128 random bits from the OS).
pub type SecretHash = [u8; 32];

impl Command {
    /// The command inside any `Sealed` and `Charged` layers (the command itself
    /// otherwise).
    pub fn unsealed(&self) -> &Command {
        match self {
            Command::Sealed { command, .. } | Command::Charged { command, .. } => {
                command.unsealed()
            }
            command => command,
        }
    }

    /// The secret hash of the outermost `Sealed` layer, if any.
    pub fn secret_hash(&self) -> Option<&SecretHash> {
        match self {
            Command::Sealed { secret_hash, .. } => Some(secret_hash),
            Command::Charged { command, .. } => command.secret_hash(),
            _ => None,
        }
    }

    /// The principal and quota of the outermost `Charged` layer, if any.
    pub fn charge(&self) -> Option<(&str, &Quota)> {
        match self {
            Command::Charged {
                principal, quota, ..
            } => Some((principal, quota)),
            Command::Sealed { command, .. } => command.charge(),
            _ => None,
        }
    }

    /// A read (`Get`, `Leader`): it changes nothing, and a leader serves it without a log
    /// entry ([`crate::node::Node::read`]).
    pub fn is_read(&self) -> bool {
        matches!(self, Command::Get { .. } | Command::Leader { .. })
    }

    /// The session this command acts for, whose secret it must present: the session of a
    /// `Revoke`, `Campaign` or `Resign`, the current leader of a `Transfer`. `Expire` and
    /// `Release` act for the leader's lease clock, not for a client, and need none.
    pub fn acting_session(&self) -> Option<SessionId> {
        match self.unsealed() {
            Command::Revoke { session }
            | Command::Campaign { session, .. }
            | Command::Resign { session, .. }
            | Command::Transfer { from: session, .. } => Some(*session),
            _ => None,
        }
    }
}

/// Who leads an election and since which token.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaderInfo {
    /// The leading candidate's session.
    pub session: SessionId,
    /// The value it campaigned with.
    pub value: Vec<u8>,
    /// Its fencing token.
    pub token: u64,
}

/// A fenced key's stored value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FencedValue {
    /// The value.
    pub value: Vec<u8>,
    /// The election whose token guarded the last accepted write.
    pub election: String,
    /// Highest token accepted for this key.
    pub token: u64,
    /// Index of the entry that wrote it.
    pub index: Index,
}

/// The result of applying one command. Errors are values: a rejected command changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Response {
    /// `Grant` succeeded.
    Granted {
        /// The new session (the entry's index).
        session: SessionId,
        /// The TTL granted, in ticks.
        ttl_ticks: u64,
    },
    /// `Revoke`, `Expire` or `Release` ended the session.
    Ended {
        /// The ended session.
        session: SessionId,
    },
    /// `Checkpoint` recorded.
    Checkpointed,
    /// `Campaign` joined (or was already in) the queue.
    Campaigned {
        /// Present if this candidate now leads, with its token.
        leader_token: Option<u64>,
        /// 0 if leading, else the number of candidates ahead of it.
        position: usize,
    },
    /// `Resign` removed the candidate.
    Resigned,
    /// `Transfer` made `to` the leader.
    Transferred {
        /// The new leader's token.
        token: u64,
    },
    /// `FencedPut` was accepted.
    Put,
    /// `Get`'s answer.
    Value(Option<FencedValue>),
    /// `Leader`'s answer.
    LeaderIs(Option<LeaderInfo>),
    /// The command was rejected; nothing changed.
    Rejected(SmError),
    // Appended last, so that the encoding of the variants above is unchanged.
    /// `SetMember` recorded the node's addresses.
    MemberSet,
    /// `DeleteElection` or `DeleteKey` left the election or key absent.
    Deleted {
        /// Whether it existed until this command (false: it was already gone).
        existed: bool,
    },
}

/// Why a command was rejected. Every variant leaves the state unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
pub enum SmError {
    /// TTL outside `[ttl_min_ticks, ttl_max_ticks]`.
    #[error("ttl {ttl_ticks} ticks is outside [{min}, {max}]")]
    TtlOutOfRange {
        /// Requested.
        ttl_ticks: u64,
        /// Minimum allowed.
        min: u64,
        /// Maximum allowed.
        max: u64,
    },
    /// The session does not exist (never granted, revoked or expired).
    #[error("session {0} does not exist (expired, revoked or never granted)")]
    UnknownSession(SessionId),
    /// No candidate ever campaigned in this election.
    #[error("election {0:?} does not exist")]
    UnknownElection(String),
    /// The session is not a candidate in this election.
    #[error("session {session} is not a candidate in election {election:?}")]
    NotCandidate {
        /// Election.
        election: String,
        /// Session.
        session: SessionId,
    },
    /// `Transfer` from a session that does not lead.
    #[error("session {session} does not lead election {election:?}")]
    NotLeader {
        /// Election.
        election: String,
        /// Session.
        session: SessionId,
    },
    /// Fenced write with a token below the highest accepted for the key.
    #[error("stale fencing token {token}: key already accepted token {current}")]
    StaleToken {
        /// Token presented.
        token: u64,
        /// Highest accepted so far.
        current: u64,
    },
    /// Fenced write with a token the election never handed out.
    #[error("fencing token {token} was never issued by election {election:?} (latest {latest})")]
    TokenNotIssued {
        /// Election.
        election: String,
        /// Token presented.
        token: u64,
        /// Latest token issued.
        latest: u64,
    },
    /// A name, key or value is empty or too long.
    #[error("{what} is {len} bytes; allowed 1..={max}")]
    BadSize {
        /// Which field.
        what: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Too many candidates in one election.
    #[error("election {0:?} has too many candidates")]
    TooManyCandidates(String),
    /// A retried request older than every result its session still remembers: it was
    /// applied or superseded long ago, and its result is gone. Nothing changed now.
    #[error("request {seq} of session {session} is older than the results remembered for it")]
    RequestForgotten {
        /// The session.
        session: SessionId,
        /// The request's sequence number.
        seq: u64,
    },
    /// A request (with a request id) on a session that no longer exists, although it may
    /// have existed (its id is below the request's log index): the results it remembered
    /// went with it, so whether an earlier attempt of this request took effect before it
    /// ended is unknown. Not a definite failure (see [`SmError::is_definite`]).
    #[error(
        "session {session} has ended, and with it what it remembered: whether request {seq} \
         took effect before it ended is unknown"
    )]
    SessionEnded {
        /// Session.
        session: SessionId,
        /// The request's sequence number.
        seq: u64,
    },
    /// A request id that does not fit its command (zero, or naming another session than
    /// the command's own).
    #[error("request id {0:?} does not fit its command")]
    BadRequestId(RequestId),
    /// Fenced write to a key that belongs to another election (the election of the key's
    /// first accepted write): one election's leader cannot fence another's data.
    #[error("key {key:?} belongs to election {bound:?}, not {election:?}")]
    WrongElection {
        /// The key.
        key: String,
        /// The election the key belongs to.
        bound: String,
        /// The election the write named.
        election: String,
    },
    /// Fenced write with a token below its election's current token: a newer leadership
    /// exists, even if it has not written this key yet.
    #[error("fencing token {token} of election {election:?} is superseded by token {current}")]
    TokenSuperseded {
        /// Election.
        election: String,
        /// Token presented.
        token: u64,
        /// The election's current (latest issued) token.
        current: u64,
    },
    /// The command acts for a session (or keeps it alive) without that session's secret,
    /// or with another one. Nothing changed.
    #[error("session {0}: the session secret is missing or wrong")]
    WrongSecret(SessionId),
    // Appended last, so that the encoding of the variants above is unchanged.
    /// `DeleteElection` of an election that still has candidates.
    #[error(
        "election {election:?} still has {candidates} candidate(s); they must resign or end first"
    )]
    ElectionInUse {
        /// Election.
        election: String,
        /// How many candidates it has.
        candidates: usize,
    },
    /// The command would take its principal over its quota; nothing changed now.
    ///
    /// Not definite for a `Grant` carrying a request nonce (`definite` false): its nonce
    /// is remembered only while the session it created lives, so a retry whose first
    /// attempt created a session that has since ended looks like a new grant, and the
    /// refusal cannot say the request never took effect. (That session has ended either
    /// way; the client holds nothing from it.)
    #[error("principal {principal:?} is at its quota of {limit} {quota}{}", if *definite { "" } else { " (if this grant was sent before, an earlier attempt may have created a session that has since ended)" })]
    QuotaExceeded {
        /// The principal.
        principal: String,
        /// Which quota: `sessions`, `elections`, `keys` or `key_bytes`.
        quota: String,
        /// The limit.
        limit: u64,
        /// Whether the request certainly never took effect (see above).
        definite: bool,
    },
    /// The command acts for a session that another principal owns.
    #[error("session {0} belongs to another principal")]
    NotOwner(SessionId),
}

impl SmError {
    /// Whether a command refused with this error certainly did not take effect and never
    /// will (DESIGN rule 7). False only where an earlier attempt of the same request may
    /// have taken effect and the state machine can no longer tell: a retry older than every
    /// remembered result, or a request on a session that has ended.
    pub fn is_definite(&self) -> bool {
        !matches!(
            self,
            SmError::RequestForgotten { .. }
                | SmError::SessionEnded { .. }
                | SmError::QuotaExceeded {
                    definite: false,
                    ..
                }
        )
    }
}

/// A change of leader in one election, emitted when a command changes who leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaderChange {
    /// Election name.
    pub election: String,
    /// The new leader, or `None` when the queue emptied.
    pub leader: Option<LeaderInfo>,
    /// Index of the entry that caused the change.
    pub index: Index,
}

mod cow;
pub mod list;
mod machine;
pub use machine::{
    check_fence, check_request_id, SessionInfo, SmDecodeError, StateImage, StateMachine,
};
