//! Cluster generations: how a cluster restored from a backup (`tenure restore`) or recovered
//! from a lost majority (`tenure recover`) starts without ever handing out a token the old
//! cluster could have handed out.
//!
//! A generation is a number kept beside a member's data (0 for a cluster that was never
//! restored or recovered). Generation `g` issues tokens above `g · 2^40`
//! ([`token_floor`]): the state it starts from is the old state with every election's latest
//! token, and the floor under elections created later, raised to `token_floor(g)`
//! ([`crate::sm::StateMachine::into_new_generation`]). The old cluster, of generation
//! `g − 1` or lower, issued every one of its tokens below `token_floor(g)` — as long as no
//! single election of one generation hands out 2^40 (about 10^12) tokens, which
//! [`start`] checks for the state it is given — so every token of the new generation is
//! above every token the old one issued, however long the old one ran after the backup.
//! docs/GUARANTEES.md has the argument and its one assumption: a backup is restored into a
//! generation above every generation restored before (`tenure restore` takes the backup's
//! plus one; restoring the same backup twice needs `--generation` above the first).
//!
//! The members of a generation refuse those of another at the peer handshake (the
//! transport's cluster name carries it), so old members cannot rejoin a new cluster.

use crate::sm::{SmDecodeError, SmLimits, StateMachine};
use crate::types::{Entry, HardState, Index, Membership, Payload, Recovered, Snapshot, Term};

/// Tokens of generation `g` start above `g << GENERATION_SHIFT`.
pub const GENERATION_SHIFT: u32 = 40;

/// The highest generation: its floor must still leave room below `u64::MAX`.
pub const GENERATION_MAX: u64 = (1 << (64 - GENERATION_SHIFT)) - 1;

/// Every token of generation `generation` is above this.
pub fn token_floor(generation: u64) -> u64 {
    generation << GENERATION_SHIFT
}

/// Why a new generation cannot start from a state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GenerationError {
    /// The state's bytes do not decode.
    #[error(transparent)]
    Decode(#[from] SmDecodeError),
    /// The new generation is not above the state's own.
    #[error("generation {new} is not above the state's generation {old}")]
    NotAbove {
        /// The generation asked for.
        new: u64,
        /// The generation the state was written under.
        old: u64,
    },
    /// The generation is past [`GENERATION_MAX`].
    #[error("generation {0} is too large (at most {GENERATION_MAX})")]
    TooLarge(u64),
    /// A token of the state is already at or above the new generation's floor: an election
    /// handed out 2^40 tokens in one generation, and the jump would not clear it.
    #[error("token {token} is at or above generation {generation}'s floor {floor}")]
    TokenAboveFloor {
        /// The highest token of the state.
        token: u64,
        /// The generation asked for.
        generation: u64,
        /// Its floor.
        floor: u64,
    },
    /// The state's log has a hole or goes back (a damaged data directory).
    #[error("the log is not contiguous after index {0}")]
    Gap(Index),
}

/// What a member of a new generation starts from: its hard state and its snapshot (the only
/// thing in its log), as a storage persists them.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    /// Term as of the snapshot, no vote, commit at the snapshot's index.
    pub hard_state: HardState,
    /// The state, jumped ([`StateMachine::into_new_generation`]), at the same index and term,
    /// with `membership`.
    pub snapshot: Snapshot,
}

/// The start of generation `generation` (above `old_generation`, the one `data` was written
/// under) from the state machine bytes `data` at `index` and `term`, for a cluster of
/// `membership`.
pub fn start(
    data: &[u8],
    index: Index,
    term: Term,
    membership: Membership,
    old_generation: u64,
    generation: u64,
) -> Result<Start, GenerationError> {
    let sm = StateMachine::restore(SmLimits::default(), data)?;
    jump(sm, index, term, membership, old_generation, generation)
}

/// The state a member's disk holds (`recovered`) with every entry of its log applied,
/// committed or not, and the index and term of its last entry: what `tenure recover` starts
/// the one-voter generation from. Entries only this member holds become committed there;
/// entries it does not hold are lost.
pub fn replay(recovered: &Recovered) -> Result<(StateMachine, Index, Term), GenerationError> {
    let (mut sm, mut index, mut term) = match &recovered.snapshot {
        Some(s) => (
            StateMachine::restore(SmLimits::default(), &s.data)?,
            s.index,
            s.term,
        ),
        None => (StateMachine::new(SmLimits::default()), 0, 0),
    };
    for Entry {
        term: t,
        index: i,
        payload,
    } in &recovered.entries
    {
        if *i != index + 1 {
            return Err(GenerationError::Gap(index));
        }
        match payload {
            Payload::Command(command) => {
                sm.apply(*i, command);
            }
            Payload::Request { id, command } => {
                sm.apply_request(*i, *id, command);
            }
            Payload::Noop | Payload::Membership(_) => {}
        }
        (index, term) = (*i, *t);
    }
    Ok((sm, index, term))
}

/// [`start`] from a state machine already in hand.
pub fn jump(
    sm: StateMachine,
    index: Index,
    term: Term,
    membership: Membership,
    old_generation: u64,
    generation: u64,
) -> Result<Start, GenerationError> {
    if generation <= old_generation {
        return Err(GenerationError::NotAbove {
            new: generation,
            old: old_generation,
        });
    }
    if generation > GENERATION_MAX {
        return Err(GenerationError::TooLarge(generation));
    }
    let floor = token_floor(generation);
    let token = sm.max_token();
    if token >= floor {
        return Err(GenerationError::TokenAboveFloor {
            token,
            generation,
            floor,
        });
    }
    let sm = sm.into_new_generation(floor);
    sm.check_invariants();
    Ok(Start {
        hard_state: HardState {
            term,
            vote: None,
            commit: index,
        },
        snapshot: Snapshot {
            index,
            term,
            membership,
            data: sm.snapshot(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::{Command, Response};

    fn campaign(sm: &mut StateMachine, index: Index, session: u64, election: &str) -> Response {
        sm.apply(
            index,
            &Command::Campaign {
                election: election.into(),
                session,
                value: b"v".to_vec(),
            },
        )
    }

    #[test]
    fn the_next_leader_of_every_election_gets_a_token_above_the_floor_and_sessions_end() {
        let mut sm = StateMachine::new(SmLimits::default());
        sm.apply(1, &Command::Grant { ttl_ticks: 10 });
        campaign(&mut sm, 2, 1, "books");
        sm.apply(
            3,
            &Command::FencedPut {
                key: "k".into(),
                value: b"v".to_vec(),
                election: "books".into(),
                token: 1,
            },
        );
        let start = start(&sm.snapshot(), 3, 1, Membership::default(), 0, 1).expect("starts");
        let mut new =
            StateMachine::restore(SmLimits::default(), &start.snapshot.data).expect("decodes");
        assert_eq!(
            new.counts(),
            (0, 1, 1),
            "sessions ended, election and key kept"
        );
        // The old holder's token is superseded; a new leader of an old and of a new election
        // gets a token above the floor.
        new.apply(4, &Command::Grant { ttl_ticks: 10 });
        match campaign(&mut new, 5, 4, "books") {
            Response::Campaigned { leader_token, .. } => {
                assert_eq!(leader_token, Some(token_floor(1) + 1))
            }
            r => panic!("{r:?}"),
        }
        match campaign(&mut new, 6, 4, "fresh") {
            Response::Campaigned { leader_token, .. } => {
                assert_eq!(leader_token, Some(token_floor(1) + 1))
            }
            r => panic!("{r:?}"),
        }
        let stale = new.apply(
            7,
            &Command::FencedPut {
                key: "k".into(),
                value: b"late".to_vec(),
                election: "books".into(),
                token: 1,
            },
        );
        assert!(matches!(stale, Response::Rejected(_)), "{stale:?}");
    }

    #[test]
    fn a_generation_not_above_the_old_one_or_a_token_past_the_floor_is_refused() {
        let sm = StateMachine::new(SmLimits::default());
        let data = sm.snapshot();
        assert_eq!(
            start(&data, 0, 0, Membership::default(), 2, 2).map(|_| ()),
            Err(GenerationError::NotAbove { new: 2, old: 2 })
        );
        assert_eq!(
            start(&data, 0, 0, Membership::default(), 0, GENERATION_MAX + 1).map(|_| ()),
            Err(GenerationError::TooLarge(GENERATION_MAX + 1))
        );
        // A state already in generation 1 (its floor raised) cannot start generation 1 again.
        let jumped = start(&data, 0, 0, Membership::default(), 0, 1).expect("starts");
        assert!(matches!(
            start(&jumped.snapshot.data, 0, 0, Membership::default(), 0, 1),
            Err(GenerationError::TokenAboveFloor { .. })
        ));
    }
}
