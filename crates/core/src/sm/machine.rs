//! The state machine itself: how each [`Command`] changes sessions, elections and fenced keys.
//!
//! Every handler validates its command completely before it mutates anything, so that a
//! rejected command leaves the state exactly as it was (DESIGN "Rules that MUST hold", 6).
//! All collections are ordered (`BTreeMap`, `BTreeSet`, `VecDeque`) so that iteration order,
//! snapshots and digests are identical on every replica.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};

use bincode::Options;
use serde::{Deserialize, Serialize};

use super::cow::CowMap;
use super::{
    Command, FencedValue, LeaderChange, LeaderInfo, MemberAddresses, Quota, RequestId, Response,
    SecretHash, SessionId, SmError, SmLimits, Usage,
};
use crate::bugs::InjectedBugs;
use crate::types::{Index, NodeId};

/// Version of the snapshot encoding, written first so that a future format is refused
/// with a clear error instead of being misread.
///
/// 2: sessions remember the results of their clients' requests, and grants their nonce.
/// 3: the member directory. 4: owners (principals) and the token floor.
const SNAPSHOT_FORMAT: u32 = 4;
/// The format before owners and the token floor: `Data` as [`DataWithoutOwners`]. Still
/// read (nothing owned, floor 0: no election was ever deleted before format 4).
const SNAPSHOT_FORMAT_WITHOUT_OWNERS: u32 = 3;
/// The format before the member directory: `State` without `members`. Still read, so that
/// a data directory written by the previous version restores (with an empty directory).
const SNAPSHOT_FORMAT_WITHOUT_MEMBERS: u32 = 2;

/// What the replicated state knows about one session's lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The TTL granted, in ticks. A keepalive extends the lease to this many ticks again.
    pub ttl_ticks: u64,
    /// Ticks the session may still live counted from the entry at `recorded_index`: the full
    /// TTL at its `Grant`, or the value of its latest `Checkpoint`. A new Raft leader starts
    /// its lease clock from this so that it neither expires the session early nor resets it.
    pub remaining_ticks: u64,
    /// Index of the entry (`Grant` or `Checkpoint`) that recorded `remaining_ticks`.
    pub recorded_index: Index,
}

/// Snapshot bytes that cannot be turned back into a state machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SmDecodeError {
    /// The bytes are not a bincode encoding of the state (truncated, corrupt, trailing bytes).
    #[error("state machine snapshot does not decode: {0}")]
    Malformed(String),
    /// The snapshot was written in a format this version does not read.
    #[error("state machine snapshot format {found} is not supported (expected {expected})")]
    UnsupportedFormat {
        /// Format found in the bytes.
        found: u32,
        /// Format this version reads and writes.
        expected: u32,
    },
    /// The bytes decode but describe a state that breaks an invariant.
    #[error("state machine snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

/// One queued candidate of an election.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct Candidate {
    /// The candidacy ends with this session.
    pub(super) session: SessionId,
    /// Published as the leader's value while this candidate leads.
    value: Vec<u8>,
}

/// One election: its FIFO queue of candidates and the latest token it issued.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct Election {
    /// Latest fencing token ever issued; never decreases and survives an empty queue, so
    /// that a later leader always gets a higher token than every earlier one.
    pub(super) token: u64,
    /// Candidates in queue order; the head leads.
    pub(super) queue: VecDeque<Candidate>,
}

impl Election {
    fn head(&self) -> Option<SessionId> {
        self.queue.front().map(|c| c.session)
    }

    fn position(&self, session: SessionId) -> Option<usize> {
        self.queue.iter().position(|c| c.session == session)
    }

    pub(super) fn leader(&self) -> Option<LeaderInfo> {
        self.queue.front().map(|c| LeaderInfo {
            session: c.session,
            value: c.value.clone(),
            token: self.token,
        })
    }
}

/// One live session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct Session {
    /// Lease bookkeeping exposed through [`StateMachine::session`].
    pub(super) info: SessionInfo,
    /// Elections this session is queued in, so that ending it does not scan every election.
    pub(super) elections: BTreeSet<String>,
    /// Results of the latest requests made on this session, by sequence number, with the
    /// index that applied each: a retry gets these back instead of applying again (Raft
    /// dissertation §6.3). At most `results_per_session_max`; the oldest go first.
    results: BTreeMap<u64, (Index, Response)>,
    /// Highest sequence number whose result was forgotten to keep `results` bounded; a
    /// request at or below it that is not in `results` is refused, never applied.
    results_forgotten_upto: u64,
    /// The nonce of the `Grant` request that created this session, if it carried one.
    grant_nonce: Option<u64>,
    /// The hash of the secret the session was granted with (`Sealed` around its `Grant`):
    /// every command acting for the session, and every keepalive, must present it.
    secret_hash: Option<SecretHash>,
}

/// Something a principal can own (see [`Command::Charged`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(super) enum Owned {
    /// A session it granted.
    Session(SessionId),
    /// An election it created by campaigning first.
    Election(String),
    /// A fenced key it wrote last.
    Key(String),
}

/// The replicated contents: what the digest covers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct Data {
    pub(super) sessions: CowMap<SessionId, Session>,
    /// Created on first campaign; removed only by `DeleteElection`, empty, which raises
    /// `token_floor` to its token so that its tokens never come back.
    pub(super) elections: CowMap<String, Election>,
    pub(super) fenced: CowMap<String, FencedValue>,
    /// Nonce of each live session's `Grant` request → the session it created, so that a
    /// retried grant returns the same session. Dropped with the session.
    grant_nonces: CowMap<u64, SessionId>,
    /// Who owns each session, election and key created by a `Charged` command; dropped
    /// with the thing owned.
    owners: CowMap<Owned, String>,
    /// The highest token any deleted election handed out: a new election's first leader
    /// gets the token above it. Never decreases.
    token_floor: u64,
}

/// `Data` as snapshot formats 2 and 3 wrote it.
#[derive(Deserialize)]
struct DataWithoutOwners {
    sessions: CowMap<SessionId, Session>,
    elections: CowMap<String, Election>,
    fenced: CowMap<String, FencedValue>,
    grant_nonces: CowMap<u64, SessionId>,
}

impl From<DataWithoutOwners> for Data {
    fn from(old: DataWithoutOwners) -> Data {
        Data {
            sessions: old.sessions,
            elections: old.elections,
            fenced: old.fenced,
            grant_nonces: old.grant_nonces,
            owners: CowMap::new(),
            token_floor: 0,
        }
    }
}

/// The bytes a fenced key counts against its owner's `key_bytes` quota.
fn key_bytes(key: &str, value: &FencedValue) -> u64 {
    (key.len() + value.value.len()) as u64
}

/// Everything a snapshot carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct State {
    applied_index: Index,
    pub(super) data: Data,
    /// Addresses of nodes, from [`Command::SetMember`] (the member directory).
    members: BTreeMap<NodeId, MemberAddresses>,
}

/// `State` as snapshot format 3 wrote it.
#[derive(Deserialize)]
struct StateWithoutOwners {
    applied_index: Index,
    data: DataWithoutOwners,
    members: BTreeMap<NodeId, MemberAddresses>,
}

/// `State` as snapshot format 2 wrote it.
#[derive(Deserialize)]
struct StateWithoutMembers {
    applied_index: Index,
    data: DataWithoutOwners,
}

fn encode(state: &State) -> Vec<u8> {
    codec()
        .serialize(&(SNAPSHOT_FORMAT, state))
        .expect("in-memory state always encodes")
}

/// A frozen copy of a [`StateMachine`]'s replicated state (see [`StateMachine::image`]).
#[derive(Clone, PartialEq, Eq)]
pub struct StateImage(State);

impl StateImage {
    /// The bytes [`StateMachine::snapshot`] returned when the image was taken.
    pub fn encode(&self) -> Vec<u8> {
        encode(&self.0)
    }

    /// The applied index the image was taken at.
    pub fn applied_index(&self) -> Index {
        self.0.applied_index
    }
}

impl std::fmt::Debug for StateImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let data = &self.0.data;
        f.debug_struct("StateImage")
            .field("applied_index", &self.0.applied_index)
            .field("sessions", &data.sessions.len())
            .field("elections", &data.elections.len())
            .field("fenced", &data.fenced.len())
            .finish()
    }
}

/// The replicated state machine: sessions, elections with fencing tokens, and fenced keys.
///
/// Feed it committed entries in log order with [`StateMachine::apply`]; it is deterministic,
/// so every replica that applies the same entries holds the same state.
#[derive(Clone, Debug)]
pub struct StateMachine {
    limits: SmLimits,
    /// Known bugs switched back on (`inject-bugs` builds only; empty otherwise).
    bugs: InjectedBugs,
    pub(super) state: State,
    /// What each principal holds, derived from `state.data.owners` (rebuilt on restore,
    /// kept up to date by every apply, compared with a recount by the invariant check).
    usage: BTreeMap<String, Usage>,
    /// Leader changes not yet collected by [`StateMachine::take_leader_changes`]. Not part of
    /// the snapshot: they are effects for the local node, not replicated state.
    leader_changes: Vec<LeaderChange>,
}

/// The caller of a `Charged` command: who, and what they may hold.
type Charge<'a> = Option<(&'a str, &'a Quota)>;

/// The bincode options of snapshots: fixed-width integers, and trailing bytes are an error
/// because they mean the bytes are not what we wrote.
fn codec() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .reject_trailing_bytes()
}

/// The hasher of [`StateMachine::digest`]: FNV-1a, 64 bits, taking integers whole and
/// byte strings a little-endian word at a time. Each step is a bijection of the running
/// hash, so two walks of equal length that differ in one value never collide. Dependency-
/// free and deterministic (digests are compared between replicas in one process, never
/// stored).
struct DigestHasher(u64);

impl DigestHasher {
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> DigestHasher {
        DigestHasher(0xcbf2_9ce4_8422_2325)
    }

    fn mix(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(Self::PRIME);
    }
}

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.mix(u64::from_le_bytes(
                word.try_into().expect("chunks of eight"),
            ));
        }
        for byte in words.remainder() {
            self.mix(u64::from(*byte));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}

/// The rule of a fenced write, apart from any store: `token` may write `key` for `election`
/// iff the election exists (`latest`: its newest token, `None` if unknown), issued `token`
/// (`1..=latest`), `token` is its newest (a replaced leader's is superseded even before its
/// successor writes), and the key is unwritten or was last written for the same election
/// with a token no newer (`bound`: its election and token). Equal tokens pass: one leader
/// writes many times. The state machine and the PostgreSQL backend both decide by it;
/// `accept_stale` is the simulator's injected bug (always false outside it).
pub fn check_fence(
    key: &str,
    election: &str,
    token: u64,
    latest: Option<u64>,
    bound: Option<(&str, u64)>,
    accept_stale: bool,
) -> Result<(), SmError> {
    let Some(latest) = latest else {
        return Err(SmError::UnknownElection(election.to_owned()));
    };
    // Token 0 is never issued: an election's first leader gets 1.
    if token == 0 || token > latest {
        return Err(SmError::TokenNotIssued {
            election: election.to_owned(),
            token,
            latest,
        });
    }
    if let Some((bound, current)) = bound {
        if bound != election {
            return Err(SmError::WrongElection {
                key: key.to_owned(),
                bound: bound.to_owned(),
                election: election.to_owned(),
            });
        }
        if current > token && !accept_stale {
            return Err(SmError::StaleToken { token, current });
        }
    }
    // A newer leader holds the election although it has not written this key yet: the
    // older token is refused all the same.
    if token < latest && !accept_stale {
        return Err(SmError::TokenSuperseded {
            election: election.to_owned(),
            token,
            current: latest,
        });
    }
    Ok(())
}

/// Refuses a request id that cannot belong to its command: zero numbers, a `Grant` without
/// a nonce or a nonce on anything else, or a session-bound command whose id names another
/// session. Shared by the leader's admission check and by `apply_request`, so a bad id is
/// refused before the log and, should one reach it, refused identically on every replica.
pub fn check_request_id(id: RequestId, command: &Command) -> Result<(), SmError> {
    let fits = match (id, command.unsealed()) {
        (RequestId::Grant { nonce }, Command::Grant { .. }) => nonce != 0,
        (RequestId::Grant { .. }, _) | (RequestId::Session { .. }, Command::Grant { .. }) => false,
        (RequestId::Session { seq: 0, .. }, _) => false,
        (
            RequestId::Session { session, .. },
            Command::Revoke { session: own }
            | Command::Campaign { session: own, .. }
            | Command::Resign { session: own, .. }
            | Command::Transfer { from: own, .. },
        ) => session == *own,
        (
            RequestId::Session { .. },
            Command::Expire { .. } | Command::Release { .. } | Command::Checkpoint { .. },
        ) => false,
        (RequestId::Session { .. }, _) => true,
    };
    if fits {
        Ok(())
    } else {
        Err(SmError::BadRequestId(id))
    }
}

/// Called after every change to an election's queue: if the head is now a different
/// session, that session's leadership gets a fresh token; if the head changed at all
/// (including to nobody), a `LeaderChange` is recorded. Keeping this in one place is what
/// guarantees that every passing of leadership raises the token (DESIGN rule 3).
fn settle_head(
    name: &str,
    election: &mut Election,
    old_head: Option<SessionId>,
    index: Index,
    changes: &mut Vec<LeaderChange>,
) {
    let new_head = election.head();
    if new_head == old_head {
        return;
    }
    if new_head.is_some() {
        election.token = election
            .token
            .checked_add(1)
            .expect("a u64 token cannot be exhausted by one per log entry");
    }
    changes.push(LeaderChange {
        election: name.to_owned(),
        leader: election.leader(),
        index,
    });
}

/// Adds (or, with `add` false, removes) `what` to `usage`.
fn count(usage: &mut Usage, what: &Owned, bytes: u64, add: bool) {
    let step = |n: &mut u64, by: u64| {
        if add {
            *n += by;
        } else {
            *n -= by;
        }
    };
    match what {
        Owned::Session(_) => step(&mut usage.sessions, 1),
        Owned::Election(_) => step(&mut usage.elections, 1),
        Owned::Key(_) => {
            step(&mut usage.keys, 1);
            step(&mut usage.key_bytes, bytes);
        }
    }
}

/// Every principal's usage, counted from the owners.
fn recount(data: &Data) -> BTreeMap<String, Usage> {
    let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
    for (what, owner) in &data.owners {
        let bytes = match what {
            Owned::Key(key) => data.fenced.get(key).map_or(0, |v| key_bytes(key, v)),
            _ => 0,
        };
        count(usage.entry(owner.clone()).or_default(), what, bytes, true);
    }
    usage
}

impl StateMachine {
    /// An empty state machine, as before the first log entry.
    pub fn new(limits: SmLimits) -> StateMachine {
        StateMachine {
            limits,
            bugs: InjectedBugs::default(),
            state: State::default(),
            usage: BTreeMap::new(),
            leader_changes: Vec::new(),
        }
    }

    /// Apply the command of the log entry at `index` and return its response.
    ///
    /// Indices must strictly increase across calls (panics otherwise: applying an entry
    /// twice or out of order would break determinism). A rejected command changes nothing
    /// but the applied index.
    pub fn apply(&mut self, index: Index, command: &Command) -> Response {
        assert!(
            index > self.state.applied_index,
            "apply index {index} does not follow applied index {}",
            self.state.applied_index
        );
        let result = self.execute(
            index,
            command.unsealed(),
            command.secret_hash(),
            command.charge(),
        );
        self.state.applied_index = index;
        result.unwrap_or_else(Response::Rejected)
    }

    /// Whether `presented` is the secret hash `session` was granted with (`None` for a
    /// session granted without one). True for a session that does not exist: the command
    /// itself then answers `UnknownSession`.
    pub fn secret_matches(&self, session: SessionId, presented: Option<&SecretHash>) -> bool {
        self.state
            .data
            .sessions
            .get(&session)
            .is_none_or(|s| s.secret_hash.as_ref() == presented)
    }

    /// Whether a command charged to `charge` may act for `session`: refused only when the
    /// session is owned by a principal and the command is charged to another one.
    fn owner_matches(&self, session: SessionId, charge: Charge<'_>) -> bool {
        match (charge, self.owner(&Owned::Session(session))) {
            (Some((principal, _)), Some(owner)) => principal == owner,
            _ => true,
        }
    }

    fn owner(&self, what: &Owned) -> Option<&str> {
        self.state.data.owners.get(what).map(String::as_str)
    }

    /// The principal that owns `session` (granted it with a `Charged` command), if any.
    pub fn session_owner(&self, session: SessionId) -> Option<&str> {
        self.owner(&Owned::Session(session))
    }

    /// What `principal` holds now.
    pub fn usage(&self, principal: &str) -> Usage {
        self.usage.get(principal).copied().unwrap_or_default()
    }

    /// What every principal that holds anything holds, by name.
    pub fn usages(&self) -> &BTreeMap<String, Usage> {
        &self.usage
    }

    /// The highest token any deleted election handed out (0 if none was ever deleted).
    pub fn token_floor(&self) -> u64 {
        self.state.data.token_floor
    }

    /// Records `principal` as the owner of `what` (taking it from any earlier owner),
    /// counting it in their usage; `None` leaves `what` owned by nobody.
    fn set_owner(&mut self, what: Owned, principal: Option<&str>) {
        self.drop_owner(&what);
        if let Some(principal) = principal {
            let bytes = self.owned_bytes(&what);
            let usage = self.usage.entry(principal.to_owned()).or_default();
            count(usage, &what, bytes, true);
            self.state.data.owners.insert(what, principal.to_owned());
        }
    }

    /// Forgets who owns `what`, uncounting it. Call before `what` itself is removed (a
    /// key's bytes are read from the stored key).
    fn drop_owner(&mut self, what: &Owned) {
        if let Some(owner) = self.state.data.owners.remove(what) {
            let bytes = self.owned_bytes(what);
            let usage = self
                .usage
                .get_mut(&owner)
                .expect("an owner's usage is counted");
            count(usage, what, bytes, false);
            if *usage == Usage::default() {
                self.usage.remove(&owner);
            }
        }
    }

    fn owned_bytes(&self, what: &Owned) -> u64 {
        match what {
            Owned::Key(key) => self
                .state
                .data
                .fenced
                .get(key)
                .map_or(0, |v| key_bytes(key, v)),
            _ => 0,
        }
    }

    /// Refuses with `QuotaExceeded` if `charge` may not hold `usage`.
    fn within_quota(charge: Charge<'_>, usage: &Usage) -> Result<(), SmError> {
        let Some((principal, quota)) = charge else {
            return Ok(());
        };
        let over = [
            ("sessions", usage.sessions, quota.sessions),
            ("elections", usage.elections, quota.elections),
            ("keys", usage.keys, quota.keys),
            ("key_bytes", usage.key_bytes, quota.key_bytes),
        ]
        .into_iter()
        .find(|(_, held, limit)| held > limit);
        match over {
            Some((name, _, limit)) => Err(SmError::QuotaExceeded {
                principal: principal.to_owned(),
                quota: name.to_owned(),
                limit,
                definite: true,
            }),
            None => Ok(()),
        }
    }

    /// `charge`'s principal's usage now (zero for no charge).
    fn charged_usage(&self, charge: Charge<'_>) -> Usage {
        charge.map_or_else(Usage::default, |(principal, _)| self.usage(principal))
    }

    /// Applies one unsealed command, with the secret hash it was sealed with, if any.
    fn execute(
        &mut self,
        index: Index,
        command: &Command,
        secret: Option<&SecretHash>,
        charge: Charge<'_>,
    ) -> Result<Response, SmError> {
        if let Some(session) = command.acting_session() {
            if !self.secret_matches(session, secret) {
                return Err(SmError::WrongSecret(session));
            }
            if !self.owner_matches(session, charge) {
                return Err(SmError::NotOwner(session));
            }
        }
        if let Some((principal, _)) = charge {
            if principal.is_empty() || principal.len() > super::PRINCIPAL_BYTES_MAX {
                return Err(SmError::BadSize {
                    what: "principal".into(),
                    len: principal.len(),
                    max: super::PRINCIPAL_BYTES_MAX,
                });
            }
        }
        self.limits.check(command)?;
        match command {
            Command::Sealed { .. } | Command::Charged { .. } => {
                unreachable!("callers unseal first")
            }
            Command::Grant { ttl_ticks } => self.grant(index, *ttl_ticks, secret.copied(), charge),
            Command::Revoke { session }
            | Command::Expire { session }
            | Command::Release { session } => self.end_session(index, *session),
            Command::Checkpoint { remaining } => Ok(self.checkpoint(index, remaining)),
            Command::Campaign {
                election,
                session,
                value,
            } => self.campaign(index, election, *session, value, charge),
            Command::Resign { election, session } => self.resign(index, election, *session),
            Command::Transfer { election, from, to } => self.transfer(index, election, *from, *to),
            Command::FencedPut {
                key,
                value,
                election,
                token,
            } => self.fenced_put(index, key, value, election, *token, charge),
            Command::DeleteElection { election } => self.delete_election(election),
            Command::DeleteKey {
                key,
                election,
                token,
            } => self.delete_key(key, election, *token),
            Command::SetMember { node, addresses } => {
                self.state.members.insert(*node, addresses.clone());
                Ok(Response::MemberSet)
            }
            Command::Get { .. } | Command::Leader { .. } => {
                match self.query(command).expect("a read") {
                    Response::Rejected(e) => Err(e),
                    r => Ok(r),
                }
            }
        }
    }

    /// The answer to a read (`Get` or `Leader`) in the current state, changing nothing;
    /// `None` for any other command. The same answer the read gets through the log.
    pub fn query(&self, command: &Command) -> Option<Response> {
        Some(match command {
            Command::Get { key } => Response::Value(self.fenced(key).cloned()),
            // An election nobody ever campaigned in is an error, not "no leader yet", so that
            // a misspelt name is noticed instead of waited on forever.
            Command::Leader { election } => {
                if self.state.data.elections.contains_key(election) {
                    Response::LeaderIs(self.leader(election))
                } else {
                    Response::Rejected(SmError::UnknownElection(election.clone()))
                }
            }
            _ => return None,
        })
    }

    /// Apply a client's command that carries a request id: the first time, as
    /// [`StateMachine::apply`] does, remembering the result; a retry of the same id gets the
    /// remembered result back and changes nothing (Raft dissertation §6.3). Returns the
    /// response and, for a retry, the index that applied the request the first time.
    ///
    /// A request on a session that no longer exists is refused: its results went with the
    /// session, so applying it could apply it twice. The refusal is `SessionEnded`, not a
    /// definite failure, when the session may have existed (an earlier attempt may have taken
    /// effect before it ended), and `UnknownSession` when it was never granted.
    pub fn apply_request(
        &mut self,
        index: Index,
        id: RequestId,
        command: &Command,
    ) -> (Response, Option<Index>) {
        // A request on a session, and a retried grant, must present the session's secret
        // before anything about the session (a remembered result, a token) is handed out.
        let presented = command.secret_hash();
        let owner = match (id, self.remembered(id)) {
            (RequestId::Session { session, .. }, _) => Some(session),
            (RequestId::Grant { .. }, Some((_, Response::Granted { session, .. }))) => {
                Some(session)
            }
            _ => None,
        };
        if let Some(session) = owner {
            if !self.secret_matches(session, presented) {
                self.advance_applied(index);
                return (Response::Rejected(SmError::WrongSecret(session)), None);
            }
            if !self.owner_matches(session, command.charge()) {
                self.advance_applied(index);
                return (Response::Rejected(SmError::NotOwner(session)), None);
            }
        }
        if let Some((first, response)) = self.remembered(id) {
            self.advance_applied(index);
            return (response, Some(first));
        }
        if let Err(e) = check_request_id(id, command) {
            self.advance_applied(index);
            return (Response::Rejected(e), None);
        }
        match id {
            RequestId::Session { session, seq } => {
                let refusal = match self.state.data.sessions.get(&session) {
                    // A session id is its grant's index: one below this index may have
                    // existed and ended, taking with it the results that would tell whether
                    // an earlier attempt of this request took effect. One at or above it was
                    // never granted, so this request cannot have taken effect.
                    None if session < index && !injected!(self.bugs.session_ended_definite) => {
                        Some(SmError::SessionEnded { session, seq })
                    }
                    None => Some(SmError::UnknownSession(session)),
                    Some(s) if seq <= s.results_forgotten_upto => {
                        Some(SmError::RequestForgotten { session, seq })
                    }
                    Some(_) => None,
                };
                if let Some(e) = refusal {
                    self.advance_applied(index);
                    return (Response::Rejected(e), None);
                }
                let response = self.apply(index, command);
                // Reads change nothing, so retrying them is harmless: nothing to remember.
                let read = command.unsealed().is_read();
                let max = self.limits.results_per_session_max.max(1);
                // The command may have ended the session (Revoke): its results go with it.
                if let Some(s) = self.state.data.sessions.get_mut(&session) {
                    if !read {
                        s.results.insert(seq, (index, response.clone()));
                        while s.results.len() > max {
                            let (oldest, _) = s.results.pop_first().expect("over the limit");
                            s.results_forgotten_upto = s.results_forgotten_upto.max(oldest);
                        }
                    }
                }
                (response, None)
            }
            RequestId::Grant { nonce } => {
                let mut response = self.apply(index, command);
                // This may be the retry of a grant whose session has ended (its nonce went
                // with it): a quota refusal cannot say the request never took effect.
                if let Response::Rejected(SmError::QuotaExceeded { definite, .. }) = &mut response {
                    *definite = injected!(self.bugs.grant_quota_definite);
                }
                if let Response::Granted { session, .. } = &response {
                    self.state.data.grant_nonces.insert(nonce, *session);
                    if let Some(s) = self.state.data.sessions.get_mut(session) {
                        s.grant_nonce = Some(nonce);
                    }
                }
                (response, None)
            }
        }
    }

    /// The remembered result of request `id`, with the index that applied it.
    pub fn remembered(&self, id: RequestId) -> Option<(Index, Response)> {
        let data = &self.state.data;
        match id {
            RequestId::Session { session, seq } => data
                .sessions
                .get(&session)
                .and_then(|s| s.results.get(&seq))
                .cloned(),
            RequestId::Grant { nonce } => {
                let session = *data.grant_nonces.get(&nonce)?;
                let s = data.sessions.get(&session)?;
                Some((
                    session,
                    Response::Granted {
                        session,
                        ttl_ticks: s.info.ttl_ticks,
                    },
                ))
            }
        }
    }

    /// For a live session: the highest sequence number whose result it forgot (0 if none).
    /// Every request above it that was applied is in the remembered results. `None` once
    /// the session is gone, with its results.
    pub fn remembers_since(&self, session: SessionId) -> Option<u64> {
        self.state
            .data
            .sessions
            .get(&session)
            .map(|s| s.results_forgotten_upto)
    }

    fn advance_applied(&mut self, index: Index) {
        assert!(
            index > self.state.applied_index,
            "apply index {index} does not follow applied index {}",
            self.state.applied_index
        );
        self.state.applied_index = index;
    }

    fn grant(
        &mut self,
        index: Index,
        ttl_ticks: u64,
        secret_hash: Option<SecretHash>,
        charge: Charge<'_>,
    ) -> Result<Response, SmError> {
        let mut usage = self.charged_usage(charge);
        usage.sessions += 1;
        Self::within_quota(charge, &usage)?;
        let info = SessionInfo {
            ttl_ticks,
            remaining_ticks: ttl_ticks,
            recorded_index: index,
        };
        let session = Session {
            info,
            elections: BTreeSet::new(),
            results: BTreeMap::new(),
            results_forgotten_upto: 0,
            grant_nonce: None,
            secret_hash,
        };
        // Indices strictly increase, so the entry's index is a session id never used before.
        let previous = self.state.data.sessions.insert(index, session);
        assert!(previous.is_none(), "session id {index} reused");
        self.set_owner(Owned::Session(index), charge.map(|c| c.0));
        Ok(Response::Granted {
            session: index,
            ttl_ticks,
        })
    }

    fn end_session(&mut self, index: Index, session: SessionId) -> Result<Response, SmError> {
        let ended = self
            .state
            .data
            .sessions
            .remove(&session)
            .ok_or(SmError::UnknownSession(session))?;
        self.drop_owner(&Owned::Session(session));
        if let Some(nonce) = ended.grant_nonce {
            self.state.data.grant_nonces.remove(&nonce);
        }
        // Elections are visited in name order, so the leader changes come out in the same
        // order on every replica.
        for name in &ended.elections {
            let election = self
                .state
                .data
                .elections
                .get_mut(name)
                .expect("a session's election index names only existing elections");
            let old_head = election.head();
            let position = election
                .position(session)
                .expect("a session's election index matches the queues");
            election.queue.remove(position);
            settle_head(name, election, old_head, index, &mut self.leader_changes);
        }
        Ok(Response::Ended { session })
    }

    fn checkpoint(&mut self, index: Index, remaining: &[(SessionId, u64)]) -> Response {
        for (id, remaining_ticks) in remaining {
            // Sessions that ended between the leader's proposal and this apply are ignored.
            if let Some(session) = self.state.data.sessions.get_mut(id) {
                // Not clamped to the TTL: the leader records more than a TTL on purpose, to
                // cover keepalives it will acknowledge before its next checkpoint commits
                // (see the lease clock in `node.rs`). Only the leader proposes checkpoints.
                session.info.remaining_ticks = *remaining_ticks;
                session.info.recorded_index = index;
            }
        }
        Response::Checkpointed
    }

    fn campaign(
        &mut self,
        index: Index,
        name: &str,
        session: SessionId,
        value: &[u8],
        charge: Charge<'_>,
    ) -> Result<Response, SmError> {
        if !self.state.data.sessions.contains_key(&session) {
            return Err(SmError::UnknownSession(session));
        }
        let creates = match self.state.data.elections.get(name) {
            Some(election) => {
                if let Some(position) = election.position(session) {
                    // A retried campaign must not move the candidate or change its value.
                    let leader_token = (position == 0).then_some(election.token);
                    return Ok(Response::Campaigned {
                        leader_token,
                        position,
                    });
                }
                if election.queue.len() >= self.limits.candidates_per_election_max {
                    return Err(SmError::TooManyCandidates(name.to_owned()));
                }
                false
            }
            None if self.limits.candidates_per_election_max == 0 => {
                return Err(SmError::TooManyCandidates(name.to_owned()));
            }
            None => true,
        };
        if creates {
            let mut usage = self.charged_usage(charge);
            usage.elections += 1;
            Self::within_quota(charge, &usage)?;
        }
        let floor = if injected!(self.bugs.deleted_election_tokens_restart) {
            0
        } else {
            self.state.data.token_floor
        };
        // Validation is complete; from here on nothing fails.
        let data = &mut self.state.data;
        data.sessions
            .get_mut(&session)
            .expect("checked above")
            .elections
            .insert(name.to_owned());
        // A new election starts at the floor, so its first leader's token is above every
        // token a deleted election of the same name handed out.
        let election = data.elections.get_or_default(name.to_owned());
        if creates {
            election.token = floor;
        }
        let old_head = election.head();
        election.queue.push_back(Candidate {
            session,
            value: value.to_vec(),
        });
        settle_head(name, election, old_head, index, &mut self.leader_changes);
        let position = election.queue.len() - 1;
        let leader_token = (position == 0).then_some(election.token);
        if creates {
            self.set_owner(Owned::Election(name.to_owned()), charge.map(|c| c.0));
        }
        Ok(Response::Campaigned {
            leader_token,
            position,
        })
    }

    fn resign(
        &mut self,
        index: Index,
        name: &str,
        session: SessionId,
    ) -> Result<Response, SmError> {
        let data = &mut self.state.data;
        let election = data
            .elections
            .get_mut(name)
            .ok_or_else(|| SmError::UnknownElection(name.to_owned()))?;
        let position = election
            .position(session)
            .ok_or_else(|| SmError::NotCandidate {
                election: name.to_owned(),
                session,
            })?;
        let old_head = election.head();
        election.queue.remove(position);
        settle_head(name, election, old_head, index, &mut self.leader_changes);
        data.sessions
            .get_mut(&session)
            .expect("every queued candidate's session exists")
            .elections
            .remove(name);
        Ok(Response::Resigned)
    }

    fn transfer(
        &mut self,
        index: Index,
        name: &str,
        from: SessionId,
        to: SessionId,
    ) -> Result<Response, SmError> {
        let election = self
            .state
            .data
            .elections
            .get_mut(name)
            .ok_or_else(|| SmError::UnknownElection(name.to_owned()))?;
        if election.head() != Some(from) {
            return Err(SmError::NotLeader {
                election: name.to_owned(),
                session: from,
            });
        }
        let to_position = election.position(to).ok_or_else(|| SmError::NotCandidate {
            election: name.to_owned(),
            session: to,
        })?;
        if from == to {
            // Already the leader: a retried transfer keeps the current token.
            return Ok(Response::Transferred {
                token: election.token,
            });
        }
        let to_candidate = election
            .queue
            .remove(to_position)
            .expect("position was just found");
        let from_candidate = election.queue.pop_front().expect("`from` is the head");
        election.queue.push_front(from_candidate);
        election.queue.push_front(to_candidate);
        settle_head(name, election, Some(from), index, &mut self.leader_changes);
        Ok(Response::Transferred {
            token: election.token,
        })
    }

    fn fenced_put(
        &mut self,
        index: Index,
        key: &str,
        value: &[u8],
        election: &str,
        token: u64,
        charge: Charge<'_>,
    ) -> Result<Response, SmError> {
        self.check_fence(key, election, token)?;
        // The key is counted against its last writer: what the writer would hold with it.
        if let Some((principal, _)) = charge {
            let mut usage = self.usage(principal);
            let owned = Owned::Key(key.to_owned());
            if self.owner(&owned) == Some(principal) {
                usage.key_bytes -= self.owned_bytes(&owned);
            } else {
                usage.keys += 1;
            }
            usage.key_bytes += (key.len() + value.len()) as u64;
            Self::within_quota(charge, &usage)?;
        }
        // Validation is complete. Uncount the key's old bytes before they are replaced.
        self.drop_owner(&Owned::Key(key.to_owned()));
        let stored = FencedValue {
            value: value.to_vec(),
            election: election.to_owned(),
            token,
            index,
        };
        self.state.data.fenced.insert(key.to_owned(), stored);
        self.set_owner(Owned::Key(key.to_owned()), charge.map(|c| c.0));
        Ok(Response::Put)
    }

    /// Removes a fenced key if `token` may write it now (the checks of `FencedPut`).
    fn delete_key(&mut self, key: &str, election: &str, token: u64) -> Result<Response, SmError> {
        self.check_fence(key, election, token)?;
        self.drop_owner(&Owned::Key(key.to_owned()));
        let existed = self.state.data.fenced.remove(key).is_some();
        Ok(Response::Deleted { existed })
    }

    /// Removes an election nobody campaigns in, raising the token floor to its token.
    fn delete_election(&mut self, name: &str) -> Result<Response, SmError> {
        let Some(election) = self.state.data.elections.get(name) else {
            return Ok(Response::Deleted { existed: false });
        };
        if !election.queue.is_empty() {
            return Err(SmError::ElectionInUse {
                election: name.to_owned(),
                candidates: election.queue.len(),
            });
        }
        let token = election.token;
        self.drop_owner(&Owned::Election(name.to_owned()));
        self.state.data.elections.remove(name);
        let floor = &mut self.state.data.token_floor;
        *floor = (*floor).max(token);
        Ok(Response::Deleted { existed: true })
    }

    /// Whether the holder of `token` in `election` may write (or remove) `key` now: the
    /// election exists and issued the token, the token is its latest, the key (if stored)
    /// belongs to the election and never accepted a higher token.
    fn check_fence(&self, key: &str, election: &str, token: u64) -> Result<(), SmError> {
        let latest = self.state.data.elections.get(election).map(|e| e.token);
        let bound = self
            .state
            .data
            .fenced
            .get(key)
            .map(|v| (v.election.as_str(), v.token));
        check_fence(
            key,
            election,
            token,
            latest,
            bound,
            injected!(self.bugs.stale_fence_accepted),
        )
    }

    /// Leader changes caused by applies since the last call, in the order they happened.
    pub fn take_leader_changes(&mut self) -> Vec<LeaderChange> {
        std::mem::take(&mut self.leader_changes)
    }

    /// The last index passed to [`StateMachine::apply`], or the index the snapshot was
    /// restored at; 0 before anything was applied.
    pub fn applied_index(&self) -> Index {
        self.state.applied_index
    }

    /// The whole replicated state, including the applied index, encoded with bincode.
    /// Pending leader changes and bug switches are not included: they are local.
    pub fn snapshot(&self) -> Vec<u8> {
        encode(&self.state)
    }

    /// A frozen copy of the replicated state, in O(1) (see `CowMap`): what
    /// [`StateMachine::snapshot`] would encode now, to encode later on any thread while
    /// this state machine goes on applying.
    pub fn image(&self) -> StateImage {
        StateImage(self.state.clone())
    }

    /// Switches known bugs back on for everything this state machine applies from now on
    /// (a test's or the simulator's; see [`crate::bugs`]).
    #[cfg(feature = "inject-bugs")]
    pub fn inject_bugs(&mut self, bugs: InjectedBugs) {
        self.bugs = bugs;
    }

    /// The bugs switched on, for a node's next state machine to carry on with.
    pub(crate) fn injected_bugs(&self) -> InjectedBugs {
        self.bugs
    }

    /// See [`StateMachine::inject_bugs`]; for the node, in every build.
    pub(crate) fn carry_bugs(&mut self, bugs: InjectedBugs) {
        self.bugs = bugs;
    }

    /// The state a new cluster generation starts from (`tenure restore`, `tenure recover`;
    /// [`crate::generation`]): every session ended — its clients belonged to the old
    /// cluster, and a holder must campaign again in the new one —, every election's latest
    /// token and the token floor raised to at least `floor`, so that the next leader of any
    /// election, old or new, gets a token above `floor`; the member directory emptied (the
    /// new cluster's members are configured anew). Fenced keys keep their values and the
    /// tokens that wrote them. The applied index is unchanged.
    pub fn into_new_generation(mut self, floor: u64) -> StateMachine {
        let index = self.state.applied_index;
        let sessions: Vec<SessionId> = self.state.data.sessions.iter().map(|(id, _)| *id).collect();
        for id in sessions {
            let _ = self.end_session(index, id);
        }
        let names: Vec<String> = self
            .state
            .data
            .elections
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            if let Some(e) = self.state.data.elections.get_mut(&name) {
                e.token = e.token.max(floor);
            }
        }
        let data = &mut self.state.data;
        data.token_floor = data.token_floor.max(floor);
        self.state.members.clear();
        self.leader_changes.clear();
        self
    }

    /// The highest token this state has issued: every election's latest and the floor.
    pub fn max_token(&self) -> u64 {
        let data = &self.state.data;
        data.elections
            .iter()
            .map(|(_, e)| e.token)
            .fold(data.token_floor, u64::max)
    }

    /// How many sessions, elections and fenced keys the state holds.
    pub fn counts(&self) -> (usize, usize, usize) {
        let data = &self.state.data;
        (data.sessions.len(), data.elections.len(), data.fenced.len())
    }

    /// A state machine holding the state that `data` (from [`StateMachine::snapshot`])
    /// encodes. Refuses bytes that do not decode or that describe an inconsistent state.
    pub fn restore(limits: SmLimits, data: &[u8]) -> Result<StateMachine, SmDecodeError> {
        let malformed = |e: bincode::Error| SmDecodeError::Malformed(e.to_string());
        // Read the format first, on its own, so that a newer format gets a clear error.
        let found: u32 = codec()
            .allow_trailing_bytes()
            .deserialize(data)
            .map_err(malformed)?;
        let state = match found {
            SNAPSHOT_FORMAT => {
                codec()
                    .deserialize::<(u32, State)>(data)
                    .map_err(malformed)?
                    .1
            }
            SNAPSHOT_FORMAT_WITHOUT_OWNERS => {
                let (_, old): (u32, StateWithoutOwners) =
                    codec().deserialize(data).map_err(malformed)?;
                State {
                    applied_index: old.applied_index,
                    data: old.data.into(),
                    members: old.members,
                }
            }
            SNAPSHOT_FORMAT_WITHOUT_MEMBERS => {
                let (_, old): (u32, StateWithoutMembers) =
                    codec().deserialize(data).map_err(malformed)?;
                State {
                    applied_index: old.applied_index,
                    data: old.data.into(),
                    members: BTreeMap::new(),
                }
            }
            found => {
                return Err(SmDecodeError::UnsupportedFormat {
                    found,
                    expected: SNAPSHOT_FORMAT,
                })
            }
        };
        let usage = recount(&state.data);
        let machine = StateMachine {
            limits,
            bugs: InjectedBugs::default(),
            state,
            usage,
            leader_changes: Vec::new(),
        };
        machine
            .violation()
            .map_or(Ok(machine), |v| Err(SmDecodeError::Inconsistent(v)))
    }

    /// The member directory: every node's addresses as last recorded by
    /// [`Command::SetMember`], by node id. Nodes that were only ever configured statically
    /// are not in it.
    pub fn members(&self) -> &BTreeMap<NodeId, MemberAddresses> {
        &self.state.members
    }

    /// The lease bookkeeping of a live session.
    pub fn session(&self, id: SessionId) -> Option<&SessionInfo> {
        self.state.data.sessions.get(&id).map(|s| &s.info)
    }

    /// How many sessions live.
    pub fn session_count(&self) -> usize {
        self.state.data.sessions.len()
    }

    /// How many records the state holds: sessions, elections and fenced keys. A snapshot's
    /// size and the time to take one grow with it.
    pub fn records(&self) -> usize {
        let data = &self.state.data;
        data.sessions.len() + data.elections.len() + data.fenced.len()
    }

    /// Every live session, in ascending id (that is, grant) order.
    pub fn sessions(&self) -> impl Iterator<Item = (SessionId, &SessionInfo)> + '_ {
        self.state
            .data
            .sessions
            .iter()
            .map(|(id, s)| (*id, &s.info))
    }

    /// Who leads `election`; `None` if nobody does or the election never existed.
    pub fn leader(&self, election: &str) -> Option<LeaderInfo> {
        self.state
            .data
            .elections
            .get(election)
            .and_then(Election::leader)
    }

    /// The latest token `election` ever issued; 0 if it never had a leader.
    pub fn token(&self, election: &str) -> u64 {
        self.state
            .data
            .elections
            .get(election)
            .map_or(0, |e| e.token)
    }

    /// The candidates of `election` in queue order, leader first.
    pub fn candidates(&self, election: &str) -> Vec<SessionId> {
        self.state
            .data
            .elections
            .get(election)
            .map_or_else(Vec::new, |e| e.queue.iter().map(|c| c.session).collect())
    }

    /// The stored value of a fenced key.
    pub fn fenced(&self, key: &str) -> Option<&FencedValue> {
        self.state.data.fenced.get(key)
    }

    /// A hash of the replicated contents (sessions, elections, fenced keys), equal on every
    /// replica that applied the same entries. It leaves out the applied index, so a rejected
    /// command or a read does not change it; compare digests at equal applied indices.
    pub fn digest(&self) -> u64 {
        let mut hasher = DigestHasher::new();
        self.state.data.hash(&mut hasher);
        self.state.members.hash(&mut hasher);
        hasher.finish()
    }

    /// Panics, naming the broken rule and the applied index, if the state is inconsistent.
    ///
    /// Invariant: every session's id (its `Grant` index) ≤ its `recorded_index` ≤ the
    /// applied index.
    /// Invariant: each session's election index lists exactly the elections it is queued in.
    /// Invariant: every queued candidate is a live session, and appears once in its queue.
    /// Invariant: every election has token ≥ 1 (it exists only because someone campaigned,
    /// which issued token 1), so in particular every election with a leader has one.
    /// Invariant: every fenced value's token is in `1..=` its election's latest token, or, if
    /// that election was deleted, `1..=` the token floor; it was written at or before the
    /// applied index.
    /// Invariant: every owner names a live session, an existing election or a stored key,
    /// and the usage counts are exactly what the owners add up to.
    ///
    /// Queue lengths are not checked against `candidates_per_election_max`, because a
    /// snapshot taken under a larger limit stays valid after the limit is lowered.
    pub fn check_invariants(&self) {
        if let Some(violation) = self.violation() {
            panic!(
                "state machine invariant violated at applied index {}: {violation}",
                self.state.applied_index
            );
        }
    }

    /// The first broken invariant (see [`StateMachine::check_invariants`]), described; shared
    /// by `check_invariants`, which panics, and `restore`, which refuses the snapshot.
    fn violation(&self) -> Option<String> {
        let applied = self.state.applied_index;
        let data = &self.state.data;
        for (id, session) in &data.sessions {
            let info = &session.info;
            if !(*id <= info.recorded_index && info.recorded_index <= applied) {
                return Some(format!(
                    "session {id} recorded at {} (applied {applied})",
                    info.recorded_index
                ));
            }
            // Together with the check on each queue below, this makes the index exact.
            for name in &session.elections {
                let queued = data.elections.get(name).and_then(|e| e.position(*id));
                if queued.is_none() {
                    return Some(format!(
                        "session {id} indexes election {name:?} but is not queued there"
                    ));
                }
            }
        }
        for (nonce, id) in &data.grant_nonces {
            if data.sessions.get(id).and_then(|s| s.grant_nonce) != Some(*nonce) {
                return Some(format!(
                    "grant nonce {nonce} names session {id}, which lacks it"
                ));
            }
        }
        for (id, session) in &data.sessions {
            if let Some(nonce) = session.grant_nonce {
                if data.grant_nonces.get(&nonce) != Some(id) {
                    return Some(format!("session {id}'s grant nonce {nonce} is not indexed"));
                }
            }
            if let Some((&first, _)) = session.results.first_key_value() {
                if first <= session.results_forgotten_upto {
                    return Some(format!(
                        "session {id} remembers request {first} at or below its forgotten mark {}",
                        session.results_forgotten_upto
                    ));
                }
            }
        }
        for (name, election) in &data.elections {
            if name.is_empty() || election.token == 0 {
                return Some(format!("election {name:?} has token {}", election.token));
            }
            let mut seen = BTreeSet::new();
            for candidate in &election.queue {
                let id = candidate.session;
                if !seen.insert(id) {
                    return Some(format!("session {id} is queued twice in election {name:?}"));
                }
                if !data
                    .sessions
                    .get(&id)
                    .is_some_and(|s| s.elections.contains(name))
                {
                    return Some(format!(
                        "candidate {id} of election {name:?} is not a live session indexing it"
                    ));
                }
            }
        }
        for (key, fenced) in &data.fenced {
            let latest = data.elections.get(&fenced.election).map(|e| e.token);
            let issued = (1..=latest.unwrap_or(data.token_floor)).contains(&fenced.token);
            if key.is_empty() || !issued || fenced.index > applied {
                return Some(format!(
                    "fenced key {key:?} holds {fenced:?} (election token {latest:?}, floor {}, applied {applied})",
                    data.token_floor
                ));
            }
        }
        for (what, owner) in &data.owners {
            let exists = match what {
                Owned::Session(id) => data.sessions.contains_key(id),
                Owned::Election(name) => data.elections.contains_key(name),
                Owned::Key(key) => data.fenced.contains_key(key),
            };
            if !exists || owner.is_empty() {
                return Some(format!("{owner:?} owns {what:?}, which does not exist"));
            }
        }
        let counted = recount(data);
        if counted != self.usage {
            return Some(format!(
                "usage {:?} differs from the owners' count {counted:?}",
                self.usage
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(n: u16) -> MemberAddresses {
        MemberAddresses {
            peer: format!("10.0.0.{n}:7000"),
            client: format!("10.0.0.{n}:7001"),
            http: String::new(),
        }
    }

    #[test]
    fn the_member_directory_is_replicated_state_and_survives_a_snapshot() {
        let mut a = StateMachine::new(SmLimits::default());
        assert_eq!(
            a.apply(
                1,
                &Command::SetMember {
                    node: 4,
                    addresses: addresses(4)
                }
            ),
            Response::MemberSet
        );
        // A later entry for the same node replaces the earlier one.
        a.apply(
            2,
            &Command::SetMember {
                node: 4,
                addresses: addresses(5),
            },
        );
        assert_eq!(a.members().get(&4), Some(&addresses(5)));
        let b = StateMachine::restore(SmLimits::default(), &a.snapshot()).expect("restores");
        assert_eq!(b.members(), a.members());
        assert_eq!(b.digest(), a.digest());
        // The digest covers the directory: replicas that disagree on it are told apart.
        let mut c = StateMachine::new(SmLimits::default());
        c.apply(
            1,
            &Command::SetMember {
                node: 4,
                addresses: addresses(4),
            },
        );
        c.apply(2, &Command::Get { key: "k".into() });
        assert_ne!(c.digest(), a.digest());
    }

    #[test]
    fn a_snapshot_of_the_format_before_owners_restores_owning_nothing_with_a_zero_floor() {
        let mut a = StateMachine::new(SmLimits::default());
        a.apply(1, &Command::Grant { ttl_ticks: 10 });
        a.apply(
            2,
            &Command::Campaign {
                election: "e".into(),
                session: 1,
                value: vec![],
            },
        );
        let d = &a.state.data;
        let old = codec()
            .serialize(&(
                SNAPSHOT_FORMAT_WITHOUT_OWNERS,
                &a.state.applied_index,
                (&d.sessions, &d.elections, &d.fenced, &d.grant_nonces),
                &a.state.members,
            ))
            .expect("encodes");
        let b = StateMachine::restore(SmLimits::default(), &old).expect("format 3 restores");
        assert_eq!(b.token("e"), 1);
        assert_eq!(b.token_floor(), 0);
        assert!(b.usages().is_empty());
        assert_eq!(b.digest(), a.digest());
    }

    #[test]
    fn a_snapshot_of_the_format_before_the_directory_restores_with_an_empty_one() {
        let mut a = StateMachine::new(SmLimits::default());
        a.apply(1, &Command::Grant { ttl_ticks: 10 });
        let d = &a.state.data;
        let old = codec()
            .serialize(&(
                SNAPSHOT_FORMAT_WITHOUT_MEMBERS,
                &a.state.applied_index,
                (&d.sessions, &d.elections, &d.fenced, &d.grant_nonces),
            ))
            .expect("encodes");
        let b =
            StateMachine::restore(SmLimits::default(), &old).expect("the previous format restores");
        assert!(b.members().is_empty());
        assert_eq!(b.session_count(), 1);
        assert_eq!(b.applied_index(), 1);
        // A format this build does not know is still refused by name.
        let newer = codec()
            .serialize(&(SNAPSHOT_FORMAT + 1, &a.state))
            .expect("encodes");
        assert!(matches!(
            StateMachine::restore(SmLimits::default(), &newer),
            Err(SmDecodeError::UnsupportedFormat { found, .. }) if found == SNAPSHOT_FORMAT + 1
        ));
    }
}
