//! The arithmetic behind `tenure plan`: it checks a deployment's timing against the rules of
//! DESIGN.md ("Timing") and estimates what a failure costs.
//!
//! - **Rules.** The election timeout covers the heartbeats a follower may miss and outlasts
//!   a leader's pause; the lease TTL outlasts a holder's renewal gap plus its pause.
//! - **Failover** ≈ detection + campaign + warm-up, for a crash of the Raft leader (best,
//!   average and worst case, by where the crash falls between heartbeats and how the
//!   randomized election timeouts fall) and of a lease holder (by where the crash falls
//!   between renewals), and what a pause of the pause budget does to each.
//! - **Renewal traffic** for N holders, **false-failover risk** (the share of pauses of
//!   the pause budget that cost a live holder its lease) and **odd/even cluster advice**.
//!
//! Everything is [`Duration`] arithmetic (exact to the nanosecond; no floating point). The
//! library reads no files and opens no sockets: the CLI gathers the inputs (flags, a TOML
//! file, a running cluster's `/metrics` through [`metrics::measure`]) into a [`Given`],
//! [`Inputs::resolve`] fills what nobody gave with defaults that say why, and [`Plan::new`]
//! does the rest.
//!
//! ```
//! use std::time::Duration;
//! use tenure_plan::{Given, Input, Inputs, Plan, Source, Value};
//!
//! let mut given = Given::default();
//! let s = Duration::from_secs;
//! given.set(Input::Heartbeat, Value::Duration(s(1)), Source::Flag).unwrap();
//! given.set(Input::MissedBeats, Value::Count(5), Source::Flag).unwrap();
//! given.set(Input::Campaign, Value::Duration(Duration::from_millis(300)), Source::Flag).unwrap();
//! given.set(Input::WarmUp, Value::Duration(s(2)), Source::Flag).unwrap();
//! let plan = Plan::new(Inputs::resolve(&given).unwrap());
//! assert_eq!(plan.raft_rule_of_thumb, Duration::from_millis(7_300));
//! assert!(plan.rules_hold());
//! ```

#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use tenure_core::config::timing;

pub mod cli;
pub mod metrics;
mod model;
mod text;

pub use model::{
    ClusterAdvice, Failover, LeasePause, Plan, RaftPause, Rule, RuleCheck, Traffic, PERMILLE,
};
pub use text::human;

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;

/// What can be wrong with the inputs or a measurement.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// An input's value is out of its range (zero where it must be positive, too long).
    #[error("{} ({}): {why}", input.key(), input.label())]
    Invalid {
        /// Which input.
        input: Input,
        /// Why, in words that say what is accepted.
        why: String,
    },
    /// A number for an input of the other kind (a count for a duration or back).
    #[error("{} ({}) is a {}, not a {}", input.key(), input.label(), input.kind(), got)]
    Kind {
        /// Which input.
        input: Input,
        /// What was given instead.
        got: &'static str,
    },
    /// An input name nobody knows (a TOML key, say).
    #[error("unknown input {0:?} (known: {known})", known = Input::known_keys())]
    Unknown(String),
    /// The metrics text could not be read.
    #[error("cannot read the metrics: {0}")]
    Metrics(String),
}

/// The longest duration any input may have: seven days, the longest TTL a node grants.
/// It also keeps every sum and product of the arithmetic far from overflowing.
pub const DURATION_MAX: Duration = Duration::from_secs(7 * 24 * 3_600);

/// The largest count an input may have.
pub const COUNT_MAX: u64 = 1_000_000_000;

/// Every input of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Input {
    /// How often the Raft leader sends heartbeats.
    Heartbeat,
    /// How many heartbeat intervals a follower waits before it campaigns.
    MissedBeats,
    /// The shortest election timeout (tenure draws each one from `[T, 2T)`).
    ElectionTimeout,
    /// From a follower's timeout to a new leader: pre-vote, vote, durable term and vote.
    Campaign,
    /// What the new leader (the application) needs before it does useful work.
    WarmUp,
    /// The lease (session) TTL.
    Ttl,
    /// How often a holder renews (sends a keepalive).
    RenewInterval,
    /// The 99th percentile of a message's delay between the parties.
    NetworkP99,
    /// The longest pause any process may take: sets both the application's and the
    /// server's budget (each of which may be given on its own).
    PauseBudget,
    /// The longest pause the lease holder's process may take (its GC, a VM stall, swapping).
    AppPauseBudget,
    /// The longest pause a tenure server may take (a VM stall, swapping; it has no GC).
    ServerPauseBudget,
    /// How late a timer may fire on a busy machine.
    SchedulingJitter,
    /// How much the holder's and the server's clocks may disagree about a TTL.
    ClockSkew,
    /// How many lease holders renew at once.
    Holders,
    /// How many voting members the cluster has.
    ClusterSize,
}

/// Whether an input is a duration or a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A duration (`500ms`, `2s`).
    Duration,
    /// A whole number.
    Count,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Duration => "duration",
            Kind::Count => "count",
        })
    }
}

impl Input {
    /// The inputs a plan resolves and reports, in the order reports list them: all but
    /// [`Input::PauseBudget`], which only stands for the two budgets it sets.
    pub const REPORTED: [Input; 14] = [
        Input::Heartbeat,
        Input::MissedBeats,
        Input::ElectionTimeout,
        Input::Campaign,
        Input::WarmUp,
        Input::Ttl,
        Input::RenewInterval,
        Input::NetworkP99,
        Input::AppPauseBudget,
        Input::ServerPauseBudget,
        Input::SchedulingJitter,
        Input::ClockSkew,
        Input::Holders,
        Input::ClusterSize,
    ];

    /// Every input a flag or a file may give: the reported ones and [`Input::PauseBudget`].
    pub const ALL: [Input; 15] = {
        let mut all = [Input::PauseBudget; 15];
        let mut i = 0;
        while i < Input::REPORTED.len() {
            all[i] = Input::REPORTED[i];
            i += 1;
        }
        all
    };

    /// Its key in a TOML file and in JSON (`missed_beats`).
    pub fn key(self) -> &'static str {
        match self {
            Input::Heartbeat => "heartbeat",
            Input::MissedBeats => "missed_beats",
            Input::ElectionTimeout => "election_timeout",
            Input::Campaign => "campaign",
            Input::WarmUp => "warm_up",
            Input::Ttl => "ttl",
            Input::RenewInterval => "renew_interval",
            Input::NetworkP99 => "network_p99",
            Input::PauseBudget => "pause_budget",
            Input::AppPauseBudget => "app_pause_budget",
            Input::ServerPauseBudget => "server_pause_budget",
            Input::SchedulingJitter => "scheduling_jitter",
            Input::ClockSkew => "clock_skew",
            Input::Holders => "holders",
            Input::ClusterSize => "cluster_size",
        }
    }

    /// Its command-line flag (`--missed-beats`).
    pub fn flag(self) -> String {
        format!("--{}", self.key().replace('_', "-"))
    }

    /// Its name in words (`missed beats`).
    pub fn label(self) -> &'static str {
        match self {
            Input::Heartbeat => "heartbeat",
            Input::MissedBeats => "missed beats",
            Input::ElectionTimeout => "election timeout",
            Input::Campaign => "campaign",
            Input::WarmUp => "warm-up",
            Input::Ttl => "TTL",
            Input::RenewInterval => "renew interval",
            Input::NetworkP99 => "network p99",
            Input::PauseBudget => "pause budget",
            Input::AppPauseBudget => "app pause",
            Input::ServerPauseBudget => "server pause",
            Input::SchedulingJitter => "scheduling jitter",
            Input::ClockSkew => "clock skew",
            Input::Holders => "holders",
            Input::ClusterSize => "cluster size",
        }
    }

    /// A duration or a count.
    pub fn kind(self) -> Kind {
        match self {
            Input::MissedBeats | Input::Holders | Input::ClusterSize => Kind::Count,
            _ => Kind::Duration,
        }
    }

    /// The input whose TOML key or flag (without `--`) is `name`.
    pub fn from_key(name: &str) -> Option<Input> {
        let name = name.replace('-', "_");
        Input::ALL.into_iter().find(|i| i.key() == name)
    }

    fn known_keys() -> String {
        Input::ALL.map(Input::key).join(", ")
    }

    /// Must this input be positive? (A zero heartbeat or TTL means nothing; a zero pause
    /// budget or warm-up is a fine answer.)
    fn positive(self) -> bool {
        matches!(
            self,
            Input::Heartbeat
                | Input::MissedBeats
                | Input::ElectionTimeout
                | Input::Ttl
                | Input::RenewInterval
                | Input::Holders
                | Input::ClusterSize
        )
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// One input's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// For [`Kind::Duration`] inputs.
    Duration(Duration),
    /// For [`Kind::Count`] inputs.
    Count(u64),
}

/// Where an input's value came from; the report shows it next to the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Given on the command line.
    Flag,
    /// Read from this TOML file.
    File(String),
    /// Measured from a running cluster, and how.
    Measured(String),
    /// Nobody gave it: a default, derived from other inputs or assumed, and why.
    Default(String),
}

impl Source {
    /// `flag`, `file`, `measured` or `default` (for JSON).
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::File(_) => "file",
            Source::Measured(_) => "measured",
            Source::Default(_) => "default",
        }
    }

    /// True for a default that stands in for something that should be measured.
    pub fn is_assumed(&self) -> bool {
        matches!(self, Source::Default(why) if why.starts_with("assumed"))
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::File(path) => write!(f, "file {path}"),
            Source::Measured(how) => write!(f, "measured: {how}"),
            Source::Default(why) => write!(f, "{why}"),
        }
    }
}

/// A value with the place it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The value used.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

/// The inputs someone gave, each checked on its way in. Setting an input twice keeps the
/// last value: set measured values first, then the file's, then the flags', and flags
/// override the file, which overrides measurements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Given {
    values: BTreeMap<Input, (Value, Source)>,
}

impl Given {
    /// Records `value` for `input` from `source`, if it is of the input's kind and in its
    /// range; otherwise changes nothing and says what is wrong.
    pub fn set(&mut self, input: Input, value: Value, source: Source) -> Result<()> {
        match (input.kind(), value) {
            (Kind::Duration, Value::Duration(d)) => {
                if input.positive() && d.is_zero() {
                    return Err(Error::Invalid {
                        input,
                        why: "must be longer than zero".into(),
                    });
                }
                if d > DURATION_MAX {
                    return Err(Error::Invalid {
                        input,
                        why: format!(
                            "{} is longer than any timing tenure accepts ({})",
                            human(d),
                            human(DURATION_MAX)
                        ),
                    });
                }
            }
            (Kind::Count, Value::Count(n)) => {
                if n == 0 {
                    return Err(Error::Invalid {
                        input,
                        why: "must be at least 1".into(),
                    });
                }
                if n > COUNT_MAX {
                    return Err(Error::Invalid {
                        input,
                        why: format!("{n} is more than {COUNT_MAX}"),
                    });
                }
            }
            (_, Value::Duration(_)) => {
                return Err(Error::Kind {
                    input,
                    got: "duration",
                })
            }
            (_, Value::Count(_)) => {
                return Err(Error::Kind {
                    input,
                    got: "count",
                })
            }
        }
        self.values.insert(input, (value, source));
        Ok(())
    }

    /// The value and source recorded for `input`, if any.
    pub fn get(&self, input: Input) -> Option<&(Value, Source)> {
        self.values.get(&input)
    }

    fn duration(&self, input: Input) -> Option<Sourced<Duration>> {
        match self.values.get(&input) {
            Some((Value::Duration(d), source)) => Some(Sourced {
                value: *d,
                source: source.clone(),
            }),
            _ => None,
        }
    }

    fn count(&self, input: Input) -> Option<Sourced<u64>> {
        match self.values.get(&input) {
            Some((Value::Count(n), source)) => Some(Sourced {
                value: *n,
                source: source.clone(),
            }),
            _ => None,
        }
    }
}

/// The server's default heartbeat (`heartbeat_ms`).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(timing::HEARTBEAT_MS);
/// The server's default election timeout (`election_timeout_ms`).
pub const DEFAULT_ELECTION_TIMEOUT: Duration = Duration::from_millis(timing::ELECTION_TIMEOUT_MS);
/// `tenure campaign`'s and `tenure run`'s default TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// The network p99 assumed when nobody measured one: a local network.
pub const ASSUMED_NETWORK_P99: Duration = Duration::from_millis(10);
/// The pause budget assumed when nobody gave one.
pub const ASSUMED_PAUSE_BUDGET: Duration = Duration::from_millis(50);
/// The scheduling jitter assumed when nobody gave one.
pub const ASSUMED_SCHEDULING_JITTER: Duration = Duration::from_millis(10);
/// The clock drift bound of the tenure client, in percent (DESIGN.md rule 4).
pub const CLIENT_DRIFT_PERCENT: u32 = 1;

/// Every input of a plan, each with its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// How often the Raft leader sends heartbeats.
    pub heartbeat: Sourced<Duration>,
    /// How many heartbeat intervals a follower waits before campaigning.
    pub missed_beats: Sourced<u64>,
    /// The shortest election timeout `T`; tenure draws each timeout from `[T, 2T)`.
    pub election_timeout: Sourced<Duration>,
    /// From a follower's timeout to a new Raft leader.
    pub campaign: Sourced<Duration>,
    /// From being elected to doing useful work (the application's).
    pub warm_up: Sourced<Duration>,
    /// The lease TTL.
    pub ttl: Sourced<Duration>,
    /// The time between a holder's renewals.
    pub renew_interval: Sourced<Duration>,
    /// A message's delay at the 99th percentile.
    pub network_p99: Sourced<Duration>,
    /// The longest pause the lease holder's process may take.
    pub app_pause_budget: Sourced<Duration>,
    /// The longest pause a server may take.
    pub server_pause_budget: Sourced<Duration>,
    /// How late a timer may fire.
    pub scheduling_jitter: Sourced<Duration>,
    /// How far the holder's and the server's clocks may disagree over one TTL.
    pub clock_skew: Sourced<Duration>,
    /// Holders renewing at once.
    pub holders: Sourced<u64>,
    /// Voting members.
    pub cluster_size: Sourced<u64>,
}

fn dflt<T>(value: T, why: impl Into<String>) -> Sourced<T> {
    Sourced {
        value,
        source: Source::Default(why.into()),
    }
}

impl Inputs {
    /// Every input: what `given` holds, and for the rest a default that says why it is
    /// what it is. The election timeout and the missed beats stand in for each other: a
    /// plan given one of them derives the other from the heartbeat.
    pub fn resolve(given: &Given) -> Result<Inputs> {
        let heartbeat = given
            .duration(Input::Heartbeat)
            .unwrap_or_else(|| dflt(DEFAULT_HEARTBEAT, "default: the server's heartbeat_ms"));
        let beats = given.count(Input::MissedBeats);
        let election_timeout = match (given.duration(Input::ElectionTimeout), &beats) {
            (Some(t), _) => t,
            (None, Some(m)) => {
                let m32 = u32::try_from(m.value).map_err(|_| Error::Invalid {
                    input: Input::MissedBeats,
                    why: format!("{} is more than {}", m.value, u32::MAX),
                })?;
                let t = heartbeat
                    .value
                    .checked_mul(m32)
                    .filter(|t| *t <= DURATION_MAX);
                let t = t.ok_or_else(|| Error::Invalid {
                    input: Input::MissedBeats,
                    why: format!(
                        "{} missed beats of {} make an election timeout longer than {}",
                        m.value,
                        human(heartbeat.value),
                        human(DURATION_MAX)
                    ),
                })?;
                dflt(t, "derived: missed beats × heartbeat")
            }
            (None, None) => dflt(
                DEFAULT_ELECTION_TIMEOUT,
                "default: the server's election_timeout_ms",
            ),
        };
        let missed_beats = beats.unwrap_or_else(|| {
            let whole = election_timeout.value.as_nanos() / heartbeat.value.as_nanos();
            dflt(
                u64::try_from(whole).unwrap_or(u64::MAX).max(1),
                "derived: whole heartbeats in the election timeout",
            )
        });
        let network_p99 = given.duration(Input::NetworkP99).unwrap_or_else(|| {
            dflt(
                ASSUMED_NETWORK_P99,
                "assumed, not measured: a local network (give --network-p99, or --from a node)",
            )
        });
        let campaign = given.duration(Input::Campaign).unwrap_or_else(|| {
            dflt(
                network_p99.value * 4,
                "derived: pre-vote and vote, two round trips of the network p99",
            )
        });
        let warm_up = given.duration(Input::WarmUp).unwrap_or_else(|| {
            dflt(
                Duration::ZERO,
                "assumed: none (give --warm-up, what your application needs)",
            )
        });
        let ttl = given
            .duration(Input::Ttl)
            .unwrap_or_else(|| dflt(DEFAULT_TTL, "default: tenure campaign's and run's --ttl"));
        let renew_interval = given
            .duration(Input::RenewInterval)
            .unwrap_or_else(|| dflt(ttl.value / 4, "default: TTL/4, what the tenure client does"));
        // --pause-budget sets both; each budget given on its own wins over it.
        let both = given.duration(Input::PauseBudget);
        let app_pause_budget = given
            .duration(Input::AppPauseBudget)
            .or_else(|| both.clone())
            .unwrap_or_else(|| {
                dflt(
                    ASSUMED_PAUSE_BUDGET,
                    "assumed: give --app-pause-budget, the holder's longest GC or VM pause",
                )
            });
        let server_pause_budget = given
            .duration(Input::ServerPauseBudget)
            .or(both)
            .unwrap_or_else(|| {
                dflt(
                    ASSUMED_PAUSE_BUDGET,
                    "assumed: give --server-pause-budget, a server's longest VM stall or swap",
                )
            });
        let scheduling_jitter = given.duration(Input::SchedulingJitter).unwrap_or_else(|| {
            dflt(
                ASSUMED_SCHEDULING_JITTER,
                "assumed: give --scheduling-jitter, how late timers fire under load",
            )
        });
        let clock_skew = given.duration(Input::ClockSkew).unwrap_or_else(|| {
            dflt(
                ttl.value * 2 * CLIENT_DRIFT_PERCENT / 100 + Duration::from_millis(10),
                "default: the client's drift margin, 2 × 1% of the TTL + 10 ms",
            )
        });
        let holders = given
            .count(Input::Holders)
            .unwrap_or_else(|| dflt(1, "default"));
        let cluster_size = given
            .count(Input::ClusterSize)
            .unwrap_or_else(|| dflt(3, "default"));
        Ok(Inputs {
            heartbeat,
            missed_beats,
            election_timeout,
            campaign,
            warm_up,
            ttl,
            renew_interval,
            network_p99,
            app_pause_budget,
            server_pause_budget,
            scheduling_jitter,
            clock_skew,
            holders,
            cluster_size,
        })
    }

    /// One input's value and source, for listing.
    pub fn get(&self, input: Input) -> (Value, &Source) {
        fn d(s: &Sourced<Duration>) -> (Value, &Source) {
            (Value::Duration(s.value), &s.source)
        }
        fn c(s: &Sourced<u64>) -> (Value, &Source) {
            (Value::Count(s.value), &s.source)
        }
        match input {
            Input::Heartbeat => d(&self.heartbeat),
            Input::MissedBeats => c(&self.missed_beats),
            Input::ElectionTimeout => d(&self.election_timeout),
            Input::Campaign => d(&self.campaign),
            Input::WarmUp => d(&self.warm_up),
            Input::Ttl => d(&self.ttl),
            Input::RenewInterval => d(&self.renew_interval),
            Input::NetworkP99 => d(&self.network_p99),
            // Stands for both; the larger is the one that matters more often.
            Input::PauseBudget => d(
                if self.app_pause_budget.value >= self.server_pause_budget.value {
                    &self.app_pause_budget
                } else {
                    &self.server_pause_budget
                },
            ),
            Input::AppPauseBudget => d(&self.app_pause_budget),
            Input::ServerPauseBudget => d(&self.server_pause_budget),
            Input::SchedulingJitter => d(&self.scheduling_jitter),
            Input::ClockSkew => d(&self.clock_skew),
            Input::Holders => c(&self.holders),
            Input::ClusterSize => c(&self.cluster_size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_where_positive_is_needed_is_refused_and_changes_nothing() {
        let mut g = Given::default();
        for input in [
            Input::Heartbeat,
            Input::Ttl,
            Input::RenewInterval,
            Input::ElectionTimeout,
        ] {
            let e = g
                .set(input, Value::Duration(Duration::ZERO), Source::Flag)
                .unwrap_err();
            assert!(e.to_string().contains("must be longer than zero"), "{e}");
            assert!(e.to_string().starts_with(input.key()), "{e}");
        }
        for input in [Input::MissedBeats, Input::Holders, Input::ClusterSize] {
            let e = g.set(input, Value::Count(0), Source::Flag).unwrap_err();
            assert!(e.to_string().contains("at least 1"), "{e}");
        }
        assert_eq!(g, Given::default());
        // A zero pause budget, warm-up or jitter is a real answer.
        g.set(
            Input::PauseBudget,
            Value::Duration(Duration::ZERO),
            Source::Flag,
        )
        .unwrap();
        g.set(Input::WarmUp, Value::Duration(Duration::ZERO), Source::Flag)
            .unwrap();
    }

    #[test]
    fn a_value_of_the_wrong_kind_or_too_large_is_refused() {
        let mut g = Given::default();
        let e = g
            .set(Input::Ttl, Value::Count(3), Source::Flag)
            .unwrap_err();
        assert_eq!(e.to_string(), "ttl (TTL) is a duration, not a count");
        let e = g
            .set(
                Input::Holders,
                Value::Duration(Duration::from_secs(1)),
                Source::Flag,
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "holders (holders) is a count, not a duration"
        );
        let e = g
            .set(
                Input::Ttl,
                Value::Duration(DURATION_MAX + Duration::from_secs(1)),
                Source::Flag,
            )
            .unwrap_err();
        assert!(e.to_string().contains("longer than any timing"), "{e}");
        let e = g
            .set(Input::Holders, Value::Count(COUNT_MAX + 1), Source::Flag)
            .unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
        assert_eq!(g, Given::default());
    }

    #[test]
    fn later_sources_override_earlier_ones() {
        let mut g = Given::default();
        let s = Duration::from_secs;
        g.set(
            Input::Ttl,
            Value::Duration(s(5)),
            Source::Measured("x".into()),
        )
        .unwrap();
        g.set(
            Input::Ttl,
            Value::Duration(s(6)),
            Source::File("f.toml".into()),
        )
        .unwrap();
        g.set(Input::Ttl, Value::Duration(s(7)), Source::Flag)
            .unwrap();
        let i = Inputs::resolve(&g).unwrap();
        assert_eq!(i.ttl.value, s(7));
        assert_eq!(i.ttl.source, Source::Flag);
    }

    #[test]
    fn missed_beats_and_election_timeout_derive_each_other() {
        let s = Duration::from_secs;
        let mut g = Given::default();
        g.set(Input::Heartbeat, Value::Duration(s(1)), Source::Flag)
            .unwrap();
        g.set(Input::MissedBeats, Value::Count(5), Source::Flag)
            .unwrap();
        let i = Inputs::resolve(&g).unwrap();
        assert_eq!(i.election_timeout.value, s(5));
        assert!(i.election_timeout.source.to_string().starts_with("derived"));

        let none = Inputs::resolve(&Given::default()).unwrap();
        assert_eq!(none.election_timeout.value, DEFAULT_ELECTION_TIMEOUT);
        assert_eq!(
            none.missed_beats.value, 5,
            "150 ms holds five 30 ms heartbeats"
        );
        assert_eq!(none.renew_interval.value, s(10) / 4);
        assert_eq!(none.clock_skew.value, Duration::from_millis(210));
    }

    #[test]
    fn input_names_round_trip() {
        for i in Input::ALL {
            assert_eq!(Input::from_key(i.key()), Some(i));
            assert_eq!(Input::from_key(&i.flag()[2..]), Some(i));
        }
        assert_eq!(Input::from_key("heartbeats"), None);
    }
}
