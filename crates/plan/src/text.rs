//! The report: text for people, JSON for scripts.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use crate::model::{Failover, Plan, PERMILLE};
use crate::{Input, Value};

/// A duration the way a person reads it, rounded to three decimals of its unit: `7.3 s`,
/// `8.467 s`, `300 ms`, `2.5 ms`, `250 µs`, `0 s`.
pub fn human(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0 s".into();
    }
    let ms = (ns + 500_000) / 1_000_000;
    if ms >= 1_000 {
        return format!("{} s", decimal(ms));
    }
    let us = (ns + 500) / 1_000;
    if us >= 1_000 {
        return format!("{} ms", decimal(us));
    }
    if ns >= 1_000 {
        return format!("{} µs", decimal(ns));
    }
    format!("{ns} ns")
}

/// `thousandths / 1000` with at most three decimals and no trailing zeros.
fn decimal(thousandths: u128) -> String {
    let (whole, frac) = (thousandths / 1_000, thousandths % 1_000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:03}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

fn per_second(milli: u128) -> String {
    format!("{}/s", decimal(milli))
}

fn value_text(v: Value) -> String {
    match v {
        Value::Duration(d) => human(d),
        Value::Count(n) => n.to_string(),
    }
}

impl Plan {
    /// The report people read.
    pub fn text(&self) -> String {
        let i = &self.inputs;
        let mut out = String::new();
        let o = &mut out;
        let _ = writeln!(o, "Inputs");
        for input in Input::REPORTED {
            let (v, source) = i.get(input);
            let _ = writeln!(o, "  {:<18} {:<9} {source}", input.label(), value_text(v));
        }

        let _ = writeln!(o, "\nRules");
        for r in &self.rules {
            let verdict = if r.holds { "ok   " } else { "FAILS" };
            let _ = writeln!(o, "  {verdict}  {}: {}", r.rule.name(), r.statement);
            if let Some(a) = &r.advice {
                let _ = writeln!(o, "         -> {a}");
            }
        }

        let (t, h) = (i.election_timeout.value, i.heartbeat.value);
        let (c, w) = (i.campaign.value, i.warm_up.value);
        let _ = writeln!(
            o,
            "\nFailover when the Raft leader crashes (detection + campaign + warm-up)"
        );
        let _ = writeln!(
            o,
            "  rule of thumb  missed beats × heartbeat + campaign + warm-up = {} × {} + {} + {} = {}",
            i.missed_beats.value,
            human(h),
            human(c),
            human(w),
            human(self.raft_rule_of_thumb)
        );
        match &self.raft_crash {
            None => {
                let _ = writeln!(o, "  none: a one-node cluster has nobody to take over");
            }
            Some(f) => {
                let followers = i.cluster_size.value - 1;
                failover_lines(
                    o,
                    f,
                    [
                        format!(
                            "the crash just before a heartbeat was due, a follower drawing the \
                             shortest timeout ({})",
                            human(t)
                        ),
                        format!(
                            "anywhere between heartbeats, the earliest of {followers} \
                             follower{} timeouts drawn from [{}, {})",
                            if followers == 1 { "'s" } else { "s'" },
                            human(t),
                            human(t * 2)
                        ),
                        format!(
                            "the crash just after a heartbeat, every timeout close to {}",
                            human(t * 2)
                        ),
                    ],
                );
            }
        }

        let (ttl, r) = (i.ttl.value, i.renew_interval.value);
        let _ = writeln!(
            o,
            "\nFailover when a lease holder crashes (expiry + notification + warm-up)"
        );
        failover_lines(
            o,
            &self.lease_crash,
            [
                format!(
                    "the crash just before a renewal: TTL − renew interval = {} left",
                    human(ttl.saturating_sub(r))
                ),
                format!(
                    "anywhere between renewals: TTL − renew interval/2 = {} left on average",
                    human(ttl.saturating_sub(r / 2))
                ),
                format!(
                    "the crash just after a renewal: the whole TTL, {}, left",
                    human(ttl)
                ),
            ],
        );
        let _ = writeln!(
            o,
            "  notification   {}: the expiry committed and the next candidate woken (2 × network p99)",
            human(self.notification)
        );

        let p = i.server_pause_budget.value;
        let pa = i.app_pause_budget.value;
        let _ = writeln!(o, "\nA pause of each budget");
        let rp = &self.raft_pause;
        let raft = if p <= rp.safe_up_to {
            "never starts an election"
        } else if p >= rp.always_from {
            "always starts an election"
        } else {
            "may start an election (if it begins close enough to a heartbeat)"
        };
        let _ = writeln!(
            o,
            "  Raft leader    paused {}: {raft}; safe up to {}, an election from {} on",
            human(p),
            human(rp.safe_up_to),
            human(rp.always_from)
        );
        let lp = &self.lease_pause;
        let holder = match lp.false_failover_permille {
            0 => "never costs a live holder its lease".to_string(),
            PERMILLE => "always costs a live holder its lease (a false failover)".to_string(),
            share => format!(
                "costs a live holder its lease (a false failover) in {}% of placements",
                decimal(u128::from(share) * 100)
            ),
        };
        let _ = writeln!(
            o,
            "  lease holder   paused {}: {holder}; safe up to {}, fatal above {}",
            human(pa),
            human(lp.safe_up_to),
            human(lp.always_above)
        );
        if lp.false_failover_permille > 0 {
            let _ = writeln!(
                o,
                "                 failover after such a pause: as after a crash at its start"
            );
        }

        let tr = &self.traffic;
        let _ = writeln!(o, "\nTraffic");
        let _ = writeln!(
            o,
            "  renewals       {} per holder (every {}), {} for {} holder{}",
            per_second(tr.per_holder_milli),
            human(r),
            per_second(tr.total_milli),
            i.holders.value,
            if i.holders.value == 1 { "" } else { "s" }
        );
        let _ = writeln!(
            o,
            "  heartbeats     {} from the Raft leader ({} follower{} every {})",
            per_second(tr.heartbeats_milli),
            i.cluster_size.value - 1,
            if i.cluster_size.value == 2 { "" } else { "s" },
            human(h)
        );

        let cl = &self.cluster;
        let _ = writeln!(o, "\nCluster");
        let _ = writeln!(
            o,
            "  {} voter{}: a quorum is {}, {} member{} may fail",
            cl.size,
            if cl.size == 1 { "" } else { "s" },
            cl.quorum,
            cl.tolerates,
            if cl.tolerates == 1 { "" } else { "s" }
        );

        if !self.warnings.is_empty() {
            let _ = writeln!(o, "\nWarnings");
            for w in &self.warnings {
                let _ = writeln!(o, "  - {w}");
            }
        }

        let failing: Vec<&str> = self
            .rules
            .iter()
            .filter(|r| !r.holds)
            .map(|r| r.rule.name())
            .collect();
        if failing.is_empty() {
            let _ = writeln!(o, "\nVerdict: every rule holds.");
        } else {
            let _ = writeln!(
                o,
                "\nVerdict: {} rule{} fail{}: {}.",
                failing.len(),
                if failing.len() == 1 { "" } else { "s" },
                if failing.len() == 1 { "s" } else { "" },
                failing.join(", ")
            );
        }
        out
    }

    /// The report scripts read: every duration in microseconds (`_us`), every rate in
    /// thousandths per second (`_milli_per_s`), keys as documented in docs/CLI.md.
    pub fn json(&self) -> serde_json::Value {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let failover = |f: &Failover| json!({"best_us": us(f.best), "average_us": us(f.average), "worst_us": us(f.worst)});
        let inputs: serde_json::Map<String, serde_json::Value> = Input::REPORTED
            .into_iter()
            .map(|input| {
                let (v, source) = self.inputs.get(input);
                let mut o = serde_json::Map::new();
                match v {
                    Value::Duration(d) => o.insert("value_us".into(), json!(us(d))),
                    Value::Count(n) => o.insert("value".into(), json!(n)),
                };
                o.insert("source".into(), json!(source.kind()));
                o.insert("from".into(), json!(source.to_string()));
                (input.key().to_string(), serde_json::Value::Object(o))
            })
            .collect();
        json!({
            "ok": self.rules_hold(),
            "inputs": inputs,
            "rules": self.rules.iter().map(|r| json!({
                "rule": r.rule.name(),
                "holds": r.holds,
                "statement": r.statement,
                "advice": r.advice,
            })).collect::<Vec<_>>(),
            "raft_crash": {
                "rule_of_thumb_us": us(self.raft_rule_of_thumb),
                "failover": self.raft_crash.as_ref().map(failover),
            },
            "lease_crash": {
                "failover": failover(&self.lease_crash),
                "notification_us": us(self.notification),
            },
            "pause": {
                "app_pause_budget_us": us(self.inputs.app_pause_budget.value),
                "server_pause_budget_us": us(self.inputs.server_pause_budget.value),
                "raft_safe_up_to_us": us(self.raft_pause.safe_up_to),
                "raft_always_from_us": us(self.raft_pause.always_from),
                "lease_safe_up_to_us": us(self.lease_pause.safe_up_to),
                "lease_always_above_us": us(self.lease_pause.always_above),
                "false_failover_permille": self.lease_pause.false_failover_permille,
            },
            "traffic": {
                "renewals_per_holder_milli_per_s": self.traffic.per_holder_milli as u64,
                "renewals_milli_per_s": u64::try_from(self.traffic.total_milli).unwrap_or(u64::MAX),
                "heartbeats_milli_per_s": u64::try_from(self.traffic.heartbeats_milli).unwrap_or(u64::MAX),
            },
            "cluster": {
                "size": self.cluster.size,
                "quorum": self.cluster.quorum,
                "tolerates": self.cluster.tolerates,
                "advice": self.cluster.advice,
            },
            "warnings": self.warnings,
        })
    }
}

fn failover_lines(o: &mut String, f: &Failover, why: [String; 3]) {
    let [best, average, worst] = why;
    let _ = writeln!(o, "  best           {:<9} {best}", human(f.best));
    let _ = writeln!(o, "  average        {:<9} {average}", human(f.average));
    let _ = writeln!(o, "  worst          {:<9} {worst}", human(f.worst));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_read_naturally() {
        let ms = Duration::from_millis;
        assert_eq!(human(ms(7_300)), "7.3 s");
        assert_eq!(human(ms(10_000)), "10 s");
        assert_eq!(human(ms(300)), "300 ms");
        assert_eq!(human(Duration::from_micros(2_500)), "2.5 ms");
        assert_eq!(human(Duration::from_micros(250)), "250 µs");
        assert_eq!(human(Duration::from_nanos(8_466_666_667)), "8.467 s");
        assert_eq!(human(Duration::from_nanos(999_999_999)), "1 s");
        assert_eq!(human(Duration::from_nanos(7)), "7 ns");
        assert_eq!(human(Duration::ZERO), "0 s");
    }
}
