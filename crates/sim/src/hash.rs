//! Stable 64-bit hashing of the values the simulator fingerprints: FNV-1a over bytes, and a
//! word-at-a-time multiply-xorshift step for integers (eight times fewer steps than feeding
//! their bytes, which matters because every event of a run is hashed).
//!
//! The trace hash and the checkers' comparisons must not depend on `Debug` output or on a
//! hasher that may change between Rust versions, so every value is fed field by field with an
//! explicit tag per variant.

use tenure_core::sm::{Command, FencedValue, LeaderInfo, RequestId, Response, SmError};
use tenure_core::types::{Membership, Payload};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// An FNV-1a 64-bit hasher over a stable encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Fnv64 {
        Fnv64::new()
    }
}

impl Fnv64 {
    /// A hasher in its initial state.
    pub fn new() -> Fnv64 {
        Fnv64(FNV_OFFSET)
    }

    /// A hasher continuing from an earlier value (used to chain log entries).
    pub fn from_state(state: u64) -> Fnv64 {
        Fnv64(state)
    }

    /// Feeds raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// Feeds a u64 as one word.
    pub fn u64(&mut self, value: u64) {
        const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
        let h = (self.0 ^ value).wrapping_mul(MIX);
        self.0 = h ^ (h >> 29);
    }

    /// Feeds a string with its length first, so that ("ab","c") and ("a","bc") differ.
    pub fn str(&mut self, value: &str) {
        self.u64(value.len() as u64);
        self.bytes(value.as_bytes());
    }

    /// Feeds a byte string with its length first.
    pub fn blob(&mut self, value: &[u8]) {
        self.u64(value.len() as u64);
        self.bytes(value);
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// Hashes a command with an explicit tag per variant.
pub fn command(h: &mut Fnv64, command: &Command) {
    match command {
        Command::Grant { ttl_ticks } => {
            h.u64(1);
            h.u64(*ttl_ticks);
        }
        Command::Revoke { session } => {
            h.u64(2);
            h.u64(*session);
        }
        Command::Expire { session } => {
            h.u64(3);
            h.u64(*session);
        }
        Command::Checkpoint { remaining } => {
            h.u64(4);
            h.u64(remaining.len() as u64);
            for (session, ticks) in remaining {
                h.u64(*session);
                h.u64(*ticks);
            }
        }
        Command::Campaign {
            election,
            session,
            value,
        } => {
            h.u64(5);
            h.str(election);
            h.u64(*session);
            h.blob(value);
        }
        Command::Resign { election, session } => {
            h.u64(6);
            h.str(election);
            h.u64(*session);
        }
        Command::Transfer { election, from, to } => {
            h.u64(7);
            h.str(election);
            h.u64(*from);
            h.u64(*to);
        }
        Command::FencedPut {
            key,
            value,
            election,
            token,
        } => {
            h.u64(8);
            h.str(key);
            h.blob(value);
            h.str(election);
            h.u64(*token);
        }
        Command::Get { key } => {
            h.u64(9);
            h.str(key);
        }
        Command::Leader { election } => {
            h.u64(10);
            h.str(election);
        }
        Command::Sealed {
            secret_hash,
            command: inner,
        } => {
            h.u64(11);
            h.bytes(secret_hash);
            self::command(h, inner);
        }
        Command::SetMember { node, addresses } => {
            h.u64(12);
            h.u64(*node);
            h.str(&addresses.peer);
            h.str(&addresses.client);
            h.str(&addresses.http);
        }
        Command::Release { session } => {
            h.u64(13);
            h.u64(*session);
        }
        Command::DeleteElection { election } => {
            h.u64(14);
            h.str(election);
        }
        Command::DeleteKey {
            key,
            election,
            token,
        } => {
            h.u64(15);
            h.str(key);
            h.str(election);
            h.u64(*token);
        }
        Command::Charged {
            principal,
            quota,
            command: inner,
        } => {
            h.u64(16);
            h.str(principal);
            for n in [quota.sessions, quota.elections, quota.keys, quota.key_bytes] {
                h.u64(n);
            }
            self::command(h, inner);
        }
        #[allow(unreachable_patterns)]
        other => {
            // A variant added to the core after this file was written: fall back to its
            // Debug text, which is stable within one build and therefore within one replay.
            h.u64(99);
            h.str(&format!("{other:?}"));
        }
    }
}

/// Hashes a log entry's payload.
pub fn payload(h: &mut Fnv64, payload: &Payload) {
    match payload {
        Payload::Noop => h.u64(1),
        Payload::Command(c) => {
            h.u64(2);
            command(h, c);
        }
        Payload::Membership(m) => {
            h.u64(3);
            membership(h, m);
        }
        Payload::Request { id, command: c } => {
            h.u64(4);
            match id {
                RequestId::Session { session, seq } => {
                    h.u64(1);
                    h.u64(*session);
                    h.u64(*seq);
                }
                RequestId::Grant { nonce } => {
                    h.u64(2);
                    h.u64(*nonce);
                }
            }
            command(h, c);
        }
    }
}

/// Hashes a membership configuration.
pub fn membership(h: &mut Fnv64, m: &Membership) {
    for set in [&m.voters, &m.voters_outgoing, &m.learners] {
        h.u64(set.len() as u64);
        for id in set {
            h.u64(*id);
        }
    }
}

fn leader_info(h: &mut Fnv64, info: &Option<LeaderInfo>) {
    match info {
        None => h.u64(0),
        Some(info) => {
            h.u64(1);
            h.u64(info.session);
            h.blob(&info.value);
            h.u64(info.token);
        }
    }
}

fn fenced_value(h: &mut Fnv64, value: &Option<FencedValue>) {
    match value {
        None => h.u64(0),
        Some(v) => {
            h.u64(1);
            h.blob(&v.value);
            h.str(&v.election);
            h.u64(v.token);
            h.u64(v.index);
        }
    }
}

/// Hashes a state machine response.
pub fn response(h: &mut Fnv64, response: &Response) {
    match response {
        Response::Granted { session, ttl_ticks } => {
            h.u64(1);
            h.u64(*session);
            h.u64(*ttl_ticks);
        }
        Response::Ended { session } => {
            h.u64(2);
            h.u64(*session);
        }
        Response::Checkpointed => h.u64(3),
        Response::Campaigned {
            leader_token,
            position,
        } => {
            h.u64(4);
            h.u64(leader_token.map_or(0, |t| t.wrapping_add(1)));
            h.u64(*position as u64);
        }
        Response::Resigned => h.u64(5),
        Response::Transferred { token } => {
            h.u64(6);
            h.u64(*token);
        }
        Response::Put => h.u64(7),
        Response::Value(v) => {
            h.u64(8);
            fenced_value(h, v);
        }
        Response::LeaderIs(info) => {
            h.u64(9);
            leader_info(h, info);
        }
        Response::Rejected(e) => {
            h.u64(10);
            sm_error(h, e);
        }
        Response::MemberSet => h.u64(11),
        #[allow(unreachable_patterns)]
        other => {
            h.u64(99);
            h.str(&format!("{other:?}"));
        }
    }
}

/// Hashes a state machine error. Errors are rare, so their Debug text is good enough.
pub fn sm_error(h: &mut Fnv64, error: &SmError) {
    h.str(&format!("{error:?}"));
}

/// The hash of one command on its own.
pub fn of_command(c: &Command) -> u64 {
    let mut h = Fnv64::new();
    command(&mut h, c);
    h.finish()
}

/// The hash of one response on its own.
pub fn of_response(r: &Response) -> u64 {
    let mut h = Fnv64::new();
    response(&mut h, r);
    h.finish()
}
