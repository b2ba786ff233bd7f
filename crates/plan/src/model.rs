//! The rules and the estimates, from resolved [`Inputs`].
//!
//! The model, in the words of DESIGN.md ("Timing") and of the core:
//!
//! - A follower resets its election timer on every heartbeat and campaigns when a timeout
//!   drawn from `[T, 2T)` passes without one. A crash at `x` after the last heartbeat
//!   (`0 ≤ x < heartbeat`) is detected `E − x` later, `E` the earliest timeout among the
//!   followers.
//! - The server expires a session `TTL` after the last keepalive it received. A holder that
//!   crashes `u` after its last renewal (`0 ≤ u < renew interval`) is detected `TTL − u`
//!   later; the expiry is committed and the next candidate woken (two network delays).
//! - A pause of `P` delays the next heartbeat or renewal by `P`: for a holder paused `u`
//!   after its last renewal, its next keepalive arrives `u + P + network p99` after the
//!   last one, and the lease is lost if that exceeds `TTL − clock skew`.

use std::time::Duration;

use crate::text::human;
use crate::Inputs;

/// Shares are given in thousandths.
pub const PERMILLE: u32 = 1_000;

/// The timing rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Election timeout ≥ missed beats × heartbeat.
    Beats,
    /// Election timeout > heartbeat + network p99 + pause budget + scheduling jitter.
    LeaderPause,
    /// TTL > renew interval + network p99 + pause budget + clock skew.
    LeasePause,
}

impl Rule {
    /// A short name (`beats`, `leader-pause`, `lease-pause`).
    pub fn name(self) -> &'static str {
        match self {
            Rule::Beats => "beats",
            Rule::LeaderPause => "leader-pause",
            Rule::LeasePause => "lease-pause",
        }
    }
}

/// One rule applied to the inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleCheck {
    /// Which rule.
    pub rule: Rule,
    /// Whether it holds.
    pub holds: bool,
    /// The rule with the numbers filled in.
    pub statement: String,
    /// When it fails: what goes wrong, and which inputs to change to what.
    pub advice: Option<String>,
}

/// A failover's duration, from the failure to the new leader doing useful work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failover {
    /// The luckiest placement of the failure.
    pub best: Duration,
    /// Averaged over where the failure falls (uniformly) and how timeouts are drawn.
    pub average: Duration,
    /// The unluckiest placement.
    pub worst: Duration,
}

/// What a pause of the pause budget does to the Raft leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftPause {
    /// Pauses up to this long never start an election (`T − heartbeat − network p99 −
    /// scheduling jitter`).
    pub safe_up_to: Duration,
    /// Pauses of at least this long always do (`2T`: every timeout has run out).
    pub always_from: Duration,
}

/// What a pause of the pause budget does to a lease holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasePause {
    /// Pauses up to this long never cost the lease (`TTL − renew interval − network p99 −
    /// clock skew`).
    pub safe_up_to: Duration,
    /// Pauses longer than this always do, wherever they fall (`TTL − network p99 − clock
    /// skew`).
    pub always_above: Duration,
    /// The share of pauses of the pause budget (placed uniformly between renewals) that
    /// cost a live holder its lease: a false failover. In thousandths.
    pub false_failover_permille: u32,
}

/// Messages per second, in thousandths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traffic {
    /// Renewals one holder sends per second, × 1000.
    pub per_holder_milli: u128,
    /// Renewals all holders send per second, × 1000.
    pub total_milli: u128,
    /// Heartbeats the Raft leader sends per second (one per follower per interval), × 1000.
    pub heartbeats_milli: u128,
}

/// How the cluster's size serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterAdvice {
    /// Voting members.
    pub size: u64,
    /// Votes needed to elect and to commit.
    pub quorum: u64,
    /// Members that may fail with the cluster still working.
    pub tolerates: u64,
    /// Advice when the size is a poor choice (even, one, very large).
    pub advice: Option<String>,
}

/// Everything `tenure plan` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What the plan was computed from.
    pub inputs: Inputs,
    /// The rules, in a fixed order.
    pub rules: Vec<RuleCheck>,
    /// The seeds' rule of thumb: missed beats × heartbeat + campaign + warm-up.
    pub raft_rule_of_thumb: Duration,
    /// The Raft leader crashes (none for a one-node cluster: nobody takes over).
    pub raft_crash: Option<Failover>,
    /// A lease holder crashes and the next candidate takes over.
    pub lease_crash: Failover,
    /// The expiry committed and the next candidate woken: two network delays.
    pub notification: Duration,
    /// The Raft leader pauses for the pause budget.
    pub raft_pause: RaftPause,
    /// A holder pauses for the pause budget.
    pub lease_pause: LeasePause,
    /// Renewals and heartbeats per second.
    pub traffic: Traffic,
    /// Odd/even advice.
    pub cluster: ClusterAdvice,
    /// Things to look at that are not rule violations.
    pub warnings: Vec<String>,
}

/// `d × n` for the small counts the inputs allow (they are capped well inside `u32`).
fn times(d: Duration, n: u64) -> Duration {
    d * u32::try_from(n).expect("counts are capped at COUNT_MAX, inside u32")
}

/// Events per second, × 1000, of `n` parties each sending once per `every`, rounded.
fn rate_milli(n: u64, every: Duration) -> u128 {
    let ns = every.as_nanos().max(1);
    (u128::from(n) * 1_000_000_000_000 + ns / 2) / ns
}

impl Plan {
    /// Applies the rules to `inputs` and estimates failover, traffic and risk.
    pub fn new(inputs: Inputs) -> Plan {
        let h = inputs.heartbeat.value;
        let m = inputs.missed_beats.value;
        let t = inputs.election_timeout.value;
        let c = inputs.campaign.value;
        let w = inputs.warm_up.value;
        let ttl = inputs.ttl.value;
        let r = inputs.renew_interval.value;
        let n = inputs.network_p99.value;
        let p = inputs.server_pause_budget.value;
        let pa = inputs.app_pause_budget.value;
        let j = inputs.scheduling_jitter.value;
        let s = inputs.clock_skew.value;
        let size = inputs.cluster_size.value;

        let mut rules = Vec::new();

        let beats = times(h, m);
        rules.push(RuleCheck {
            rule: Rule::Beats,
            holds: t >= beats,
            statement: format!(
                "election timeout {} ≥ missed beats × heartbeat = {m} × {} = {}",
                human(t),
                human(h),
                human(beats)
            ),
            advice: (t < beats).then(|| {
                format!(
                    "a follower campaigns after {} missed heartbeats, not {m}: raise \
                     --election-timeout to at least {}, or shorten --heartbeat to at most {}",
                    t.as_nanos() / h.as_nanos(),
                    human(beats),
                    human(t / u32::try_from(m).expect("counts are capped inside u32"))
                )
            }),
        });

        let leader_sum = h + n + p + j;
        rules.push(RuleCheck {
            rule: Rule::LeaderPause,
            holds: t > leader_sum,
            statement: format!(
                "election timeout {} > heartbeat + network p99 + server pause + scheduling \
                 jitter = {} + {} + {} + {} = {}",
                human(t),
                human(h),
                human(n),
                human(p),
                human(j),
                human(leader_sum)
            ),
            advice: (t <= leader_sum).then(|| {
                let room = t.saturating_sub(h + n + j);
                let budget = if room.is_zero() {
                    format!(
                        "heartbeat, network p99 and jitter alone take {}",
                        human(h + n + j)
                    )
                } else {
                    format!("or keep --server-pause-budget under {}", human(room))
                };
                // What to run the servers with: the smallest whole multiple of 50 ms above
                // the sum, and a heartbeat of at most a fifth of it (DESIGN: heartbeat ≤ T/5).
                let step = 50u128;
                let suggest_ms = (leader_sum.as_millis() / step + 1) * step;
                format!(
                    "a Raft leader that pauses {} just before a heartbeat is due starts an \
                     election: raise --election-timeout above {} ({budget}; a shorter \
                     --heartbeat helps too); for example run every server with \
                     `tenure server --election-timeout-ms {suggest_ms} --heartbeat-ms {}`",
                    human(p),
                    human(leader_sum),
                    (suggest_ms / 5).min(h.as_millis().max(1)),
                )
            }),
        });

        let lease_sum = r + n + pa + s;
        rules.push(RuleCheck {
            rule: Rule::LeasePause,
            holds: ttl > lease_sum,
            statement: format!(
                "TTL {} > renew interval + network p99 + app pause + clock skew = {} + {} + \
                 {} + {} = {}",
                human(ttl),
                human(r),
                human(n),
                human(pa),
                human(s),
                human(lease_sum)
            ),
            advice: (ttl <= lease_sum).then(|| {
                let room = ttl.saturating_sub(n + pa + s);
                let renew = if room.is_zero() {
                    format!(
                        "no renew interval is short enough: network p99 + app pause + \
                         clock skew = {} leave nothing of the {} TTL",
                        human(n + pa + s),
                        human(ttl)
                    )
                } else {
                    format!(
                        "or renew more often: --renew-interval under {}",
                        human(room)
                    )
                };
                format!(
                    "a holder that pauses {} just before it renews loses its lease while \
                     alive (a false failover): raise --ttl above {} ({renew})",
                    human(pa),
                    human(lease_sum)
                )
            }),
        });

        let raft_rule_of_thumb = beats + c + w;
        let followers = size.saturating_sub(1);
        let raft_crash = (followers > 0).then(|| Failover {
            best: t.saturating_sub(h) + c + w,
            // The earliest of k timeouts drawn uniformly from [T, 2T) is T + T/(k+1) on
            // average; the crash falls half a heartbeat after the last one on average.
            average: (t + t / u32::try_from(followers + 1).expect("capped inside u32"))
                .saturating_sub(h / 2)
                + c
                + w,
            worst: t * 2 + c + w,
        });

        let notification = n * 2;
        let lease_crash = Failover {
            best: ttl.saturating_sub(r) + notification + w,
            average: ttl.saturating_sub(r / 2) + notification + w,
            worst: ttl + notification + w,
        };

        let raft_pause = RaftPause {
            safe_up_to: t.saturating_sub(h + n + j),
            always_from: t * 2,
        };

        let excess = (pa + r + n + s).saturating_sub(ttl);
        let share = excess.as_nanos() * u128::from(PERMILLE) / r.as_nanos().max(1);
        let lease_pause = LeasePause {
            safe_up_to: ttl.saturating_sub(r + n + s),
            always_above: ttl.saturating_sub(n + s),
            false_failover_permille: u32::try_from(share.min(u128::from(PERMILLE)))
                .expect("at most PERMILLE"),
        };

        let traffic = Traffic {
            per_holder_milli: rate_milli(1, r),
            total_milli: rate_milli(inputs.holders.value, r),
            heartbeats_milli: rate_milli(followers, h),
        };

        let cluster = cluster_advice(size);

        let mut warnings = Vec::new();
        let assumed: Vec<&str> = [
            (&inputs.network_p99.source, "network p99"),
            (&inputs.app_pause_budget.source, "app pause"),
            (&inputs.server_pause_budget.source, "server pause"),
            (&inputs.scheduling_jitter.source, "scheduling jitter"),
            (&inputs.warm_up.source, "warm-up"),
        ]
        .into_iter()
        .filter(|(source, _)| source.is_assumed())
        .map(|(_, label)| label)
        .collect();
        if !assumed.is_empty() {
            warnings.push(format!(
                "assumed, not measured or given: {}; measure with --from URL or give them",
                assumed.join(", ")
            ));
        }
        if let Some(a) = &cluster.advice {
            warnings.push(a.clone());
        }

        Plan {
            inputs,
            rules,
            raft_rule_of_thumb,
            raft_crash,
            lease_crash,
            notification,
            raft_pause,
            lease_pause,
            traffic,
            cluster,
            warnings,
        }
    }

    /// True when every rule holds.
    pub fn rules_hold(&self) -> bool {
        self.rules.iter().all(|r| r.holds)
    }

    /// This plan's renewal traffic relative to `other`'s, in thousandths (5000: five times
    /// as many renewals per second), exact but for the final rounding down.
    pub fn renewals_relative_to(&self, other: &Plan) -> u128 {
        let mine =
            u128::from(self.inputs.holders.value) * other.inputs.renew_interval.value.as_nanos();
        let theirs =
            u128::from(other.inputs.holders.value) * self.inputs.renew_interval.value.as_nanos();
        mine * u128::from(PERMILLE) / theirs.max(1)
    }
}

fn cluster_advice(size: u64) -> ClusterAdvice {
    let quorum = size / 2 + 1;
    let tolerates = size - quorum;
    let advice = if size == 1 {
        Some(
            "1 voter tolerates no failure: run 3 (or 5) for a cluster that survives one (two)"
                .to_string(),
        )
    } else if size.is_multiple_of(2) {
        Some(format!(
            "{size} voters tolerate {tolerates} failed member{s}, no more than {odd} do, and \
             need a larger quorum ({quorum} instead of {odd_quorum}): run {odd} or {next}",
            s = if tolerates == 1 { "" } else { "s" },
            odd = size - 1,
            odd_quorum = (size - 1) / 2 + 1,
            next = size + 1
        ))
    } else if size > 7 {
        Some(format!(
            "{size} voters make every commit wait for {quorum} of them: 5 or 7 voters, with \
             learners for more copies, commit faster"
        ))
    } else {
        None
    };
    ClusterAdvice {
        size,
        quorum,
        tolerates,
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Given, Input, Source, Value};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn plan(pairs: &[(Input, Value)]) -> Plan {
        let mut g = Given::default();
        for (i, v) in pairs {
            g.set(*i, *v, Source::Flag).expect("valid input");
        }
        Plan::new(Inputs::resolve(&g).expect("resolves"))
    }

    fn d(i: Input, millis: u64) -> (Input, Value) {
        (i, Value::Duration(ms(millis)))
    }

    fn check(p: &Plan, rule: Rule) -> &RuleCheck {
        p.rules
            .iter()
            .find(|r| r.rule == rule)
            .expect("every rule is checked")
    }

    #[test]
    fn beats_rule_holds_at_and_above_missed_beats_times_heartbeat() {
        let base = [
            d(Input::Heartbeat, 1_000),
            (Input::MissedBeats, Value::Count(5)),
        ];
        for (t, holds) in [(5_000, true), (6_000, true), (4_999, false), (3_000, false)] {
            let p = plan(&[base[0], base[1], d(Input::ElectionTimeout, t)]);
            let c = check(&p, Rule::Beats);
            assert_eq!(c.holds, holds, "T = {t} ms: {}", c.statement);
            assert_eq!(c.advice.is_some(), !holds);
        }
        let p = plan(&[base[0], base[1], d(Input::ElectionTimeout, 3_000)]);
        assert_eq!(
            check(&p, Rule::Beats).advice.as_deref(),
            Some(
                "a follower campaigns after 3 missed heartbeats, not 5: raise \
                 --election-timeout to at least 5 s, or shorten --heartbeat to at most 600 ms"
            )
        );
    }

    #[test]
    fn leader_pause_rule_needs_the_timeout_above_heartbeat_network_pause_and_jitter() {
        let fixed = [
            d(Input::Heartbeat, 30),
            d(Input::NetworkP99, 10),
            d(Input::SchedulingJitter, 10),
            d(Input::ElectionTimeout, 150),
        ];
        let with_pause = |p| {
            let mut all = fixed.to_vec();
            all.push(d(Input::PauseBudget, p));
            plan(&all)
        };
        assert!(check(&with_pause(99), Rule::LeaderPause).holds);
        let at = with_pause(100);
        let c = check(&at, Rule::LeaderPause);
        assert!(!c.holds, "150 ms is not above 30 + 10 + 100 + 10 ms");
        assert_eq!(
            c.advice.as_deref(),
            Some(
                "a Raft leader that pauses 100 ms just before a heartbeat is due starts an \
                 election: raise --election-timeout above 150 ms (or keep --server-pause-budget \
                 under 100 ms; a shorter --heartbeat helps too); for example run every server \
                 with `tenure server --election-timeout-ms 200 --heartbeat-ms 30`"
            )
        );
        assert_eq!(at.raft_pause.safe_up_to, ms(100));
    }

    #[test]
    fn lease_pause_rule_needs_the_ttl_above_renewal_network_pause_and_skew() {
        let fixed = [
            d(Input::Ttl, 10_000),
            d(Input::RenewInterval, 3_000),
            d(Input::NetworkP99, 10),
            d(Input::ClockSkew, 210),
        ];
        let with_pause = |p| {
            let mut all = fixed.to_vec();
            all.push(d(Input::PauseBudget, p));
            plan(&all)
        };
        let ok = with_pause(6_779);
        assert!(check(&ok, Rule::LeasePause).holds);
        assert_eq!(ok.lease_pause.false_failover_permille, 0);
        let bad = with_pause(6_780);
        let c = check(&bad, Rule::LeasePause);
        assert!(!c.holds);
        assert_eq!(
            c.advice.as_deref(),
            Some(
                "a holder that pauses 6.78 s just before it renews loses its lease while \
                 alive (a false failover): raise --ttl above 10 s (or renew more often: \
                 --renew-interval under 3 s)"
            )
        );
        let hopeless = with_pause(10_000);
        assert!(check(&hopeless, Rule::LeasePause)
            .advice
            .as_deref()
            .is_some_and(|a| a.contains("no renew interval is short enough")));
    }

    #[test]
    fn a_pause_between_the_bounds_costs_the_lease_in_proportion() {
        // TTL 10 s, renew 3 s, no network or skew: pauses up to 7 s are safe, above 10 s
        // always fatal; 8.5 s is fatal for the half of placements within 1.5 s of renewing.
        let p = plan(&[
            d(Input::Ttl, 10_000),
            d(Input::RenewInterval, 3_000),
            d(Input::NetworkP99, 0),
            d(Input::ClockSkew, 0),
            d(Input::PauseBudget, 8_500),
        ]);
        assert_eq!(p.lease_pause.safe_up_to, ms(7_000));
        assert_eq!(p.lease_pause.always_above, ms(10_000));
        assert_eq!(p.lease_pause.false_failover_permille, 500);
    }

    #[test]
    fn cluster_advice_is_for_odd_sizes() {
        assert_eq!(cluster_advice(3).advice, None);
        assert_eq!(cluster_advice(5).tolerates, 2);
        assert_eq!(
            cluster_advice(4).advice.as_deref(),
            Some(
                "4 voters tolerate 1 failed member, no more than 3 do, and need a larger \
                 quorum (3 instead of 2): run 3 or 5"
            )
        );
        assert!(cluster_advice(1).advice.is_some());
        assert!(cluster_advice(9).advice.is_some());
        assert_eq!(cluster_advice(2).tolerates, 0);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn any_plan() -> impl Strategy<Value = Plan> {
            (
                1u64..5_000,
                1u64..20,
                1u64..60_000,
                0u64..5_000,
                0u64..10_000,
                1u64..600_000,
                1u64..600_000,
                0u64..1_000,
                0u64..20_000,
                1u64..10,
            )
                .prop_map(|(h, m, t, c, w, ttl, r, n, p, size)| {
                    plan(&[
                        d(Input::Heartbeat, h),
                        (Input::MissedBeats, Value::Count(m)),
                        d(Input::ElectionTimeout, t),
                        d(Input::Campaign, c),
                        d(Input::WarmUp, w),
                        d(Input::Ttl, ttl),
                        d(Input::RenewInterval, r),
                        d(Input::NetworkP99, n),
                        d(Input::PauseBudget, p),
                        (Input::ClusterSize, Value::Count(size)),
                    ])
                })
        }

        proptest! {
            #[test]
            fn best_is_at_most_average_is_at_most_worst(p in any_plan()) {
                let l = p.lease_crash;
                prop_assert!(l.best <= l.average && l.average <= l.worst, "{l:?}");
                if let Some(f) = p.raft_crash {
                    prop_assert!(f.best <= f.average && f.average <= f.worst, "{f:?}");
                }
            }

            #[test]
            fn the_lease_rule_holds_exactly_when_no_pause_of_the_budget_is_fatal(p in any_plan()) {
                let holds = p.rules.iter().find(|r| r.rule == Rule::LeasePause).map(|r| r.holds);
                if holds == Some(true) {
                    prop_assert_eq!(p.lease_pause.false_failover_permille, 0);
                }
                if p.lease_pause.false_failover_permille > 0 {
                    prop_assert_eq!(holds, Some(false));
                }
                prop_assert!(p.lease_pause.safe_up_to <= p.lease_pause.always_above);
            }

            #[test]
            fn a_longer_pause_is_never_less_risky(p in any_plan(), extra in 0u64..5_000) {
                let mut g = Given::default();
                for i in Input::REPORTED {
                    let (v, _) = p.inputs.get(i);
                    g.set(i, v, Source::Flag).expect("the plan's own inputs are valid");
                }
                g.set(
                    Input::AppPauseBudget,
                    Value::Duration(p.inputs.app_pause_budget.value + ms(extra)),
                    Source::Flag,
                ).expect("valid");
                let longer = Plan::new(Inputs::resolve(&g).expect("resolves"));
                prop_assert!(longer.lease_pause.false_failover_permille >= p.lease_pause.false_failover_permille);
            }
        }
    }
}
