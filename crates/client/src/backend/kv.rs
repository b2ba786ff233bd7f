//! Fenced keys over a store of plain bytes that has a compare-and-set: etcd (a `Txn` whose
//! compares are revisions) and ZooKeeper (a `multi` whose checks are versions).
//!
//! A write reads, at one moment, the election's leading candidacy and the key's record
//! ([`Record`]: the election and token that last wrote it, then the value), decides by the
//! same rule as the cluster ([`judge`], which is [`tenure_core::sm::check_fence`]), and
//! commits only if neither changed since the read: the leading candidacy is still there
//! (the same incarnation: a revision or sequence number is never reused) and the key is at
//! the version read. A candidacy created later can never come before one that exists, so
//! "still there" means "still leads": the write lands only while the writer's token leads,
//! atomically. When the compare fails, the write reads again and decides again.
//!
//! One difference from the cluster and PostgreSQL, which remember an election's newest
//! token after its holder is gone: here an election whose candidacies are all gone has no
//! newest token, so a write needs its token's candidacy to be alive and leading — a holder
//! whose session expired is refused even when nobody has replaced it yet
//! ([`Error::SessionLost`]). That is stricter, never weaker.
// PostgreSQL keeps its own records and uses only the request checks.
#![cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]

use tenure_core::sm::{check_fence, Command, SmLimits};

use super::Fence;
use crate::{Error, Result};

/// How many times a write reads and decides again when its compare fails (other writers of
/// the key, a change of leader) before it gives up with [`Error::Unavailable`].
pub(crate) const ATTEMPTS: usize = 32;

/// The first bytes of every record: a format tag, so that a value written by something
/// else is reported, not misread.
const TAG: &[u8; 4] = b"tnk1";

/// What a fenced key's store holds: who wrote it last, and the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub election: String,
    pub token: u64,
    pub value: Vec<u8>,
}

impl Record {
    /// `TAG`, the token (8 bytes, big-endian), the election's length (4 bytes) and name,
    /// then the value.
    pub fn encode(election: &str, token: u64, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + election.len() + value.len());
        out.extend_from_slice(TAG);
        out.extend_from_slice(&token.to_be_bytes());
        out.extend_from_slice(&(election.len() as u32).to_be_bytes());
        out.extend_from_slice(election.as_bytes());
        out.extend_from_slice(value);
        out
    }

    /// The record in `bytes`, stored at `key`.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Record> {
        let bad = || {
            Error::Backend(format!(
                "the record stored for fenced key {key:?} is not one tenure wrote"
            ))
        };
        let rest = bytes.strip_prefix(TAG.as_slice()).ok_or_else(bad)?;
        let (token, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_be_bytes(*len) as usize;
        if rest.len() < len {
            return Err(bad());
        }
        let (election, value) = rest.split_at(len);
        Ok(Record {
            election: String::from_utf8(election.to_vec()).map_err(|_| bad())?,
            token: u64::from_be_bytes(*token),
            value: value.to_vec(),
        })
    }
}

/// Who leads an election, as a write reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Leading {
    /// Nobody ever campaigned in it (etcd can tell; ZooKeeper fails the read instead).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Unknown,
    /// It has no candidacy left.
    Nobody,
    /// Its leading candidacy's token.
    Token(u64),
}

/// The request checks of a fenced write (sizes, an empty key), the same as the cluster's.
pub(crate) fn check_request(key: &str, value: Option<&[u8]>, fence: Fence<'_>) -> Result<()> {
    let (key, election, token) = (key.to_string(), fence.election.to_string(), fence.token);
    let command = match value {
        Some(v) => Command::FencedPut {
            key,
            value: v.to_vec(),
            election,
            token,
        },
        None => Command::DeleteKey {
            key,
            election,
            token,
        },
    };
    SmLimits::default().check(&command)?;
    Ok(())
}

/// The request checks of a read of `key`, the same as the cluster's.
pub(crate) fn check_get(key: &str) -> Result<()> {
    SmLimits::default().check(&Command::Get {
        key: key.to_string(),
    })?;
    Ok(())
}

/// Whether `fence` may write `key` now, given who leads its election and who wrote the key
/// last (`bound`).
pub(crate) fn judge(
    key: &str,
    fence: Fence<'_>,
    leading: Leading,
    bound: Option<&Record>,
) -> Result<()> {
    let latest = match leading {
        Leading::Unknown => None,
        Leading::Nobody => return Err(Error::SessionLost),
        Leading::Token(t) => Some(t),
    };
    let bound = bound.map(|r| (r.election.as_str(), r.token));
    check_fence(key, fence.election, fence.token, latest, bound, false)?;
    Ok(())
}

/// The failure of a write whose compare kept failing.
pub(crate) fn contended(scheme: &str, key: &str) -> Error {
    Error::Unavailable(format!(
        "{scheme}: fenced key {key:?} changed under {ATTEMPTS} attempts in a row (other \
         writers, or the election's leader changing); nothing was written by this call"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(token: u64) -> Fence<'static> {
        Fence {
            election: "e",
            token,
            session: None,
        }
    }

    #[test]
    fn a_record_reads_back_as_written_and_foreign_bytes_are_refused() {
        let bytes = Record::encode("nightly", 42, b"\x00value");
        let r = Record::decode("k", &bytes).expect("decodes");
        assert_eq!(
            r,
            Record {
                election: "nightly".into(),
                token: 42,
                value: b"\x00value".to_vec()
            }
        );
        for foreign in [&b""[..], b"tnk1", b"hello world", &bytes[..15]] {
            assert!(matches!(
                Record::decode("k", foreign),
                Err(Error::Backend(_))
            ));
        }
    }

    #[test]
    fn the_leading_token_writes_and_every_other_is_refused() {
        let mine = Record {
            election: "e".into(),
            token: 5,
            value: vec![],
        };
        assert_eq!(judge("k", fence(5), Leading::Token(5), None), Ok(()));
        assert_eq!(judge("k", fence(5), Leading::Token(5), Some(&mine)), Ok(()));
        assert_eq!(
            judge("k", fence(5), Leading::Token(9), Some(&mine)),
            Err(Error::StaleToken { current: 9 })
        );
        assert!(matches!(
            judge("k", fence(9), Leading::Token(5), None),
            Err(Error::TokenNotIssued(_))
        ));
        assert_eq!(
            judge("k", fence(5), Leading::Nobody, None),
            Err(Error::SessionLost)
        );
        assert_eq!(
            judge("k", fence(5), Leading::Unknown, None),
            Err(Error::UnknownElection("e".into()))
        );
        let other = Record {
            election: "f".into(),
            ..mine
        };
        assert!(matches!(
            judge("k", fence(5), Leading::Token(5), Some(&other)),
            Err(Error::WrongElection(_))
        ));
    }
}
