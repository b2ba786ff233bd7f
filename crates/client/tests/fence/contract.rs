//! The fencing contract (DESIGN.md rule 3), one specification for every store that
//! `tenure::fence` ships: a stale token never commits, a fresh one is never refused, and the
//! check and the write are one atomic step.
//!
//! A store's test file implements [`Store`] over its helpers and invokes
//! [`fence_contract!`], which writes one `#[test]` per case, so that one failure does not
//! hide the others. What only one store has (its documented SQL, its error type's mapping,
//! its install under a race) stays in that store's file.

// Each store's test crate uses every part of the contract; the module is shared by path.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

/// The resource the cases protect.
pub const RESOURCE: &str = "nightly-billing";

/// What a fenced write came to, in the contract's words (each store maps its own error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Refused: the store's mark for the resource is `current`, above the token.
    Stale { current: u64 },
    /// Refused: the token does not fit the store's integer type.
    OutOfRange { token: u64 },
    /// The store would not wait for a lock another transaction holds.
    Busy,
    /// Any other store failure.
    Store(String),
}

/// A store under the contract: a database of its own per case, with the product's fence
/// installed and a table `log(id, token, writer)` whose id order is the commit order of
/// fenced writes to one resource.
pub trait Store: Send + Sync + Sized + 'static {
    /// A connection; each writer thread has its own.
    type Conn: Send + 'static;

    /// A fresh database, the fence installed and an empty log.
    fn fresh() -> Self;
    /// A connection that waits (long) for locks.
    fn connect(&self) -> Self::Conn;
    /// A connection that gives up on a lock at once, answering [`Verdict::Busy`].
    fn connect_impatient(&self) -> Self::Conn;

    /// One log row `(token, writer)` written in a fenced transaction (the helper's `begin`),
    /// with a yield between the guard and the write to widen the window a split guard
    /// would leave.
    fn write(c: &mut Self::Conn, token: u64, writer: u64) -> Result<(), Verdict>;
    /// The same write without the guard: what the checker must catch.
    fn write_unguarded(c: &mut Self::Conn, token: u64, writer: u64) -> Result<(), Verdict>;
    /// The same row through the helper's single-statement call (`execute_fenced`) on
    /// `resource`.
    fn execute_fenced(
        c: &mut Self::Conn,
        resource: &str,
        token: u64,
        writer: u64,
    ) -> Result<(), Verdict>;
    /// The same row in the application's own transaction, guarded with `fence_in`.
    fn fence_in(c: &mut Self::Conn, token: u64, writer: u64) -> Result<(), Verdict>;

    /// A fenced transaction with `token` whose application write fails (a missing table):
    /// `begin`, the failing write, then the transaction dropped. Returns the token the
    /// open transaction reported.
    fn begin_then_fail(c: &mut Self::Conn, token: u64) -> u64;
    /// A fenced transaction with `token` that the application rolls back.
    fn begin_then_roll_back(c: &mut Self::Conn, token: u64);
    /// `execute_fenced` with a statement that fails: the store's error.
    fn execute_fenced_failing(c: &mut Self::Conn, token: u64) -> Result<(), Verdict>;
    /// A fenced transaction with `token` held open while `during` runs, then the row
    /// `(token, writer)` written and committed.
    fn hold_fenced(c: &mut Self::Conn, token: u64, writer: u64, during: &mut dyn FnMut());

    /// The log in id (commit) order.
    fn log(c: &mut Self::Conn) -> Vec<(u64, u64)>;
    /// The store's mark for `resource`.
    fn current(c: &mut Self::Conn, resource: &str) -> Option<u64>;
    /// Empties the log and the fence table.
    fn reset(c: &mut Self::Conn);
    /// Empties the log only; the marks stay.
    fn reset_log_only(c: &mut Self::Conn);
}

/// Fenced writes to one resource are serialized by the store (its write lock, or the fence
/// row's lock taken before the log row's id is drawn and held until commit), so the log's id
/// order is commit order and the mark at a write's commit is the highest token committed
/// before it. A committed token below that mark is a stale write that got through.
pub fn check_log(log: &[(u64, u64)]) -> Result<(), String> {
    let mut mark = 0;
    for (i, &(token, writer)) in log.iter().enumerate() {
        if token < mark {
            return Err(format!(
                "commit #{i}: writer {writer} committed token {token} below the mark {mark}"
            ));
        }
        mark = token;
    }
    Ok(())
}

pub fn first_write_for_a_resource_is_accepted<S: Store>() {
    let s = S::fresh();
    let mut c = s.connect();
    assert_eq!(S::current(&mut c, RESOURCE), None);
    S::write(&mut c, 42, 1).unwrap();
    assert_eq!(S::current(&mut c, RESOURCE), Some(42));
    // Resources are independent: a low token is a first write elsewhere.
    assert_eq!(S::current(&mut c, "other"), None);
    S::execute_fenced(&mut c, "other", 1, 9).unwrap();
    assert_eq!(S::current(&mut c, "other"), Some(1));
    assert_eq!(S::current(&mut c, RESOURCE), Some(42));
    assert_eq!(S::log(&mut c), vec![(42, 1), (1, 9)]);
}

pub fn equal_token_is_accepted_many_times<S: Store>() {
    let s = S::fresh();
    let mut c = s.connect();
    for _ in 0..3 {
        S::write(&mut c, 42, 1).unwrap();
    }
    S::execute_fenced(&mut c, RESOURCE, 42, 1).unwrap();
    assert_eq!(S::log(&mut c), vec![(42, 1); 4]);
    assert_eq!(S::current(&mut c, RESOURCE), Some(42));
}

pub fn lower_token_is_refused_with_the_current_mark<S: Store>() {
    // The story: leader 42 writes, is replaced by 43, wakes up and writes again.
    let s = S::fresh();
    let mut c = s.connect();
    S::write(&mut c, 42, 1).unwrap();
    S::write(&mut c, 43, 2).unwrap();
    assert_eq!(S::write(&mut c, 42, 1), Err(Verdict::Stale { current: 43 }));
    assert_eq!(
        S::execute_fenced(&mut c, RESOURCE, 41, 0),
        Err(Verdict::Stale { current: 43 })
    );
    assert_eq!(
        S::fence_in(&mut c, 40, 0),
        Err(Verdict::Stale { current: 43 })
    );
    assert_eq!(S::log(&mut c), vec![(42, 1), (43, 2)]);
    assert_eq!(S::current(&mut c, RESOURCE), Some(43));
    // The refusals left no transaction open: the connection is usable.
    S::write(&mut c, 44, 3).unwrap();
    assert_eq!(S::log(&mut c).len(), 3);
}

pub fn a_rolled_back_fenced_transaction_does_not_raise_the_mark<S: Store>() {
    let s = S::fresh();
    let mut c = s.connect();
    S::write(&mut c, 5, 1).unwrap();
    assert_eq!(
        S::begin_then_fail(&mut c, 9),
        9,
        "the open transaction's token"
    );
    assert_eq!(S::current(&mut c, RESOURCE), Some(5));
    S::begin_then_roll_back(&mut c, 8);
    assert_eq!(S::current(&mut c, RESOURCE), Some(5));
    // A failing single write rolls its guard back too.
    let r = S::execute_fenced_failing(&mut c, 9);
    assert!(matches!(r, Err(Verdict::Store(_))), "{r:?}");
    assert_eq!(S::current(&mut c, RESOURCE), Some(5));
    S::write(&mut c, 6, 1).unwrap();
    assert_eq!(S::log(&mut c), vec![(5, 1), (6, 1)]);
}

/// The guard and the write share one transaction: while a fenced transaction is open, no
/// one else can move the mark, so a newer leader waits for the older one's write to land
/// (and then supersedes it) instead of slipping in between the check and the write. This
/// holds for a brand-new resource (no mark yet) and for an existing one.
pub fn the_mark_cannot_move_between_the_guard_and_the_write<S: Store>() {
    let s = S::fresh();
    for existing in [false, true] {
        let mut old = s.connect();
        let mut impatient = s.connect_impatient();
        S::reset(&mut old);
        if existing {
            S::write(&mut old, 41, 1).unwrap();
            S::reset_log_only(&mut old);
        }
        let mut waiter = None;
        S::hold_fenced(&mut old, 42, 1, &mut || {
            // The old leader pauses here; the new one tries to write meanwhile, and must
            // wait: one that will not wait is refused busy, one that waits is still waiting
            // when the old one goes on.
            assert_eq!(
                S::write(&mut impatient, 43, 2),
                Err(Verdict::Busy),
                "the new leader got past an open fenced transaction (existing mark: {existing})"
            );
            let mut patient = s.connect();
            let w = thread::spawn(move || S::write(&mut patient, 43, 2));
            thread::sleep(Duration::from_millis(200));
            assert!(!w.is_finished(), "the new leader did not wait");
            waiter = Some(w);
        });
        // As soon as the old one committed, the waiting new leader goes ahead.
        waiter.expect("ran").join().unwrap().unwrap();
        assert_eq!(
            S::write(&mut old, 42, 1),
            Err(Verdict::Stale { current: 43 })
        );
        let log = S::log(&mut old);
        assert_eq!(log, vec![(42, 1), (43, 2)]);
        check_log(&log).unwrap();
    }
}

pub fn fence_in_guards_the_applications_own_transaction<S: Store>() {
    let s = S::fresh();
    let mut c = s.connect();
    S::write(&mut c, 10, 1).unwrap();
    assert_eq!(
        S::fence_in(&mut c, 9, 2),
        Err(Verdict::Stale { current: 10 })
    );
    S::fence_in(&mut c, 11, 2).unwrap();
    assert_eq!(S::log(&mut c), vec![(10, 1), (11, 2)]);
    assert_eq!(S::current(&mut c, RESOURCE), Some(11));
}

pub fn out_of_range_token_is_refused_and_changes_nothing<S: Store>() {
    let s = S::fresh();
    let mut c = s.connect();
    for token in [u64::MAX, i64::MAX as u64 + 1] {
        assert_eq!(
            S::write(&mut c, token, 1),
            Err(Verdict::OutOfRange { token })
        );
        assert_eq!(
            S::execute_fenced(&mut c, RESOURCE, token, 1),
            Err(Verdict::OutOfRange { token })
        );
    }
    assert_eq!(S::current(&mut c, RESOURCE), None);
    S::write(&mut c, i64::MAX as u64, 1).unwrap();
    assert_eq!(S::log(&mut c), vec![(i64::MAX as u64, 1)]);
    assert_eq!(S::current(&mut c, RESOURCE), Some(i64::MAX as u64));
}

/// A tiny deterministic generator (xorshift64*), one per writer thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[derive(Debug, Default)]
pub struct Outcomes {
    /// (token, writer) of accepted writes.
    pub accepted: Vec<(u64, u64)>,
    /// (token, the mark reported) of refused writes.
    pub refused: Vec<(u64, u64)>,
    /// Writes by the newest leader (the highest token issued so far) that were refused.
    pub fresh_refused: Vec<(u64, Verdict)>,
    pub fresh: usize,
}

const WRITERS: u64 = 8;
const WRITES_EACH: u64 = 100;

/// Many writers, each with its own connection, holding stale and fresh tokens in
/// interleaved order. A writer either becomes the newest leader (takes the next token while
/// holding the issuer, and writes with it, sometimes several times, so that it is still the
/// highest token issued while it writes), or writes as a stale leader with any older token,
/// concurrently with everyone.
pub fn run_writers<S: Store>(s: &S, guarded: bool) -> (Outcomes, Vec<(u64, u64)>) {
    let write: fn(&mut S::Conn, u64, u64) -> Result<(), Verdict> = if guarded {
        S::write
    } else {
        S::write_unguarded
    };
    // The highest token issued so far. Locked by the newest leader while it writes.
    let issuer = Arc::new(Mutex::new(0u64));
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let start = Arc::new(Barrier::new(WRITERS as usize));
    let threads: Vec<_> = (1..=WRITERS)
        .map(|writer| {
            let mut c = s.connect();
            let (issuer, outcomes, start) = (issuer.clone(), outcomes.clone(), start.clone());
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ writer.wrapping_mul(0x1234_5677));
                start.wait();
                for _ in 0..WRITES_EACH {
                    if rng.below(4) == 0 {
                        let mut issued = issuer.lock().unwrap();
                        *issued += 1;
                        let token = *issued;
                        for _ in 0..=rng.below(3) {
                            let r = write(&mut c, token, writer);
                            let mut o = outcomes.lock().unwrap();
                            o.fresh += 1;
                            match r {
                                Ok(()) => o.accepted.push((token, writer)),
                                Err(e) => o.fresh_refused.push((token, e)),
                            }
                        }
                    } else {
                        let issued = *issuer.lock().unwrap();
                        if issued == 0 {
                            continue;
                        }
                        let token = 1 + rng.below(issued);
                        let r = write(&mut c, token, writer);
                        let mut o = outcomes.lock().unwrap();
                        match r {
                            Ok(()) => o.accepted.push((token, writer)),
                            Err(Verdict::Stale { current }) => o.refused.push((token, current)),
                            Err(e) => panic!("writer {writer}, token {token}: {e:?}"),
                        }
                    }
                    if rng.below(8) == 0 {
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let outcomes = Arc::try_unwrap(outcomes).unwrap().into_inner().unwrap();
    let log = S::log(&mut s.connect());
    (outcomes, log)
}

pub fn concurrent_writers_never_commit_a_stale_token_and_never_refuse_a_fresh_one<S: Store>() {
    let s = S::fresh();
    let (o, log) = run_writers(&s, true);

    // No stale write committed: in commit order, tokens never decrease.
    check_log(&log).unwrap();
    // What committed is exactly what was reported accepted.
    let mut committed = log.clone();
    let mut accepted = o.accepted.clone();
    committed.sort_unstable();
    accepted.sort_unstable();
    assert_eq!(committed, accepted);
    // No fresh write was refused.
    assert!(
        o.fresh_refused.is_empty(),
        "fresh writes refused: {:?}",
        o.fresh_refused
    );
    // Every refusal was right: the mark it reported is above the token and was committed.
    let tokens: BTreeSet<u64> = log.iter().map(|&(t, _)| t).collect();
    for &(token, current) in &o.refused {
        assert!(current > token, "refused {token} with mark {current}");
        assert!(
            tokens.contains(&current),
            "refused {token} with uncommitted mark {current}"
        );
    }
    // The run exercised both paths, and the mark is the newest leader's token.
    assert!(o.fresh >= 10, "only {} fresh writes", o.fresh);
    assert!(o.refused.len() >= 10, "only {} refusals", o.refused.len());
    let mark = S::current(&mut s.connect(), RESOURCE);
    assert_eq!(mark, tokens.last().copied());
    eprintln!(
        "{} writes: {} committed ({} fresh), {} stale refused, mark {mark:?}",
        o.accepted.len() + o.refused.len(),
        log.len(),
        o.fresh,
        o.refused.len()
    );
}

/// The checker is not vacuous: the same run without the guard commits stale writes, and
/// `check_log` says so.
pub fn without_the_guard_a_stale_write_gets_through_and_the_check_catches_it<S: Store>() {
    // The story, deterministically.
    let s = S::fresh();
    let mut c = s.connect();
    S::write_unguarded(&mut c, 43, 2).unwrap();
    S::write_unguarded(&mut c, 42, 1).unwrap();
    let err = check_log(&S::log(&mut c)).unwrap_err();
    assert!(err.contains("token 42 below the mark 43"), "{err}");

    // And under the concurrent run.
    let s = S::fresh();
    let (o, log) = run_writers(&s, false);
    assert!(o.refused.is_empty());
    assert!(
        check_log(&log).is_err(),
        "an unguarded run of {} writes committed no stale token",
        log.len()
    );
}

/// One `#[test]` per case of the contract, for the store type given.
#[macro_export]
macro_rules! fence_contract {
    ($store:ty) => {
        $crate::fence_contract!(@cases $store;
            first_write_for_a_resource_is_accepted,
            equal_token_is_accepted_many_times,
            lower_token_is_refused_with_the_current_mark,
            a_rolled_back_fenced_transaction_does_not_raise_the_mark,
            the_mark_cannot_move_between_the_guard_and_the_write,
            fence_in_guards_the_applications_own_transaction,
            out_of_range_token_is_refused_and_changes_nothing,
            concurrent_writers_never_commit_a_stale_token_and_never_refuse_a_fresh_one,
            without_the_guard_a_stale_write_gets_through_and_the_check_catches_it,
        );
    };
    (@cases $store:ty; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                contract::$case::<$store>();
            }
        )*
    };
}
