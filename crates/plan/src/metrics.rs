//! Inputs measured from a running node: its `/metrics` (Prometheus text) and the size of
//! its voter set (from `/status`).
//!
//! The server exports latencies as histograms with fixed buckets, so a quantile is known only
//! up to the bucket it falls in: every value taken from here is the **upper bound** of the
//! bucket that holds the 99th percentile, and says so. What is taken:
//!
//! | input | from |
//! |---|---|
//! | network p99 | the larger p99 of `tenure_commit_latency_seconds` (a round trip to a majority with its fsync: more than one message's delay) and `tenure_lease_renewal_seconds` (a keepalive's handling) |
//! | campaign | 2 × the p99 of `tenure_commit_latency_seconds` (pre-vote and vote: two rounds to a majority, the vote made durable) |
//! | cluster size | the voters in `/status` |
//!
//! `tenure_fsync_seconds`, `tenure_failover_seconds` and `tenure_lease_age_at_renewal_seconds`
//! are reported as notes. The heartbeat and election timeout the node was configured with
//! come from the `timing` of its `/status` (`tenure plan`'s `configured_timing`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::text::human;
use crate::{Error, Input, Result, Value};

/// One histogram: cumulative bucket counts by upper bound (`None` is `+Inf`), in the order
/// of their bounds, and the number of samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// `(le, cumulative count)`.
    pub buckets: Vec<(Option<Duration>, u64)>,
    /// Samples (`_count`).
    pub count: u64,
}

/// A quantile read from buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantile {
    /// The histogram holds no samples.
    NoSamples,
    /// The quantile is at most this (the upper bound of its bucket).
    AtMost(Duration),
    /// The quantile lies above the largest finite bucket, which is this.
    Above(Duration),
}

impl Histogram {
    /// The 99th percentile's bucket bound.
    pub fn p99(&self) -> Quantile {
        if self.count == 0 {
            return Quantile::NoSamples;
        }
        let rank = (u128::from(self.count) * 99).div_ceil(100);
        let largest = self
            .buckets
            .iter()
            .filter_map(|(le, _)| *le)
            .max()
            .unwrap_or(Duration::ZERO);
        for (le, cumulative) in &self.buckets {
            if u128::from(*cumulative) >= rank {
                return match le {
                    Some(le) => Quantile::AtMost(*le),
                    None => Quantile::Above(largest),
                };
            }
        }
        Quantile::Above(largest)
    }
}

/// A bucket bound in seconds (`0.00025`, `2.5`, `1`) as a duration, exact to the
/// nanosecond; `+Inf` is `None`.
fn parse_le(text: &str) -> std::result::Result<Option<Duration>, String> {
    if text == "+Inf" {
        return Ok(None);
    }
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 9 {
        return Err(format!("bucket bound {text:?} is not a number of seconds"));
    }
    let secs: u64 = whole
        .parse()
        .map_err(|_| format!("bucket bound {text:?} is too large"))?;
    let nanos: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}")
            .parse()
            .map_err(|_| format!("bucket bound {text:?} is not a number"))?
    };
    Ok(Some(Duration::new(secs, nanos)))
}

/// A sample count: an integer, or a float with nothing after the point but zeros.
fn parse_count(text: &str) -> std::result::Result<u64, String> {
    let whole = match text.split_once('.') {
        Some((whole, frac)) if frac.bytes().all(|b| b == b'0') => whole,
        Some(_) => return Err(format!("count {text:?} is not a whole number")),
        None => text,
    };
    whole
        .parse()
        .map_err(|_| format!("count {text:?} is not a whole number"))
}

/// Every histogram in `text` whose buckets carry no label but `le`.
pub fn histograms(text: &str) -> Result<BTreeMap<String, Histogram>> {
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: String| Error::Metrics(format!("line {}: {why}", n + 1));
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if let Some((name, labels)) = series.split_once("_bucket{") {
            let Some(le) = labels
                .strip_suffix('}')
                .and_then(|l| l.strip_prefix("le=\""))
                .and_then(|l| l.strip_suffix('"'))
            else {
                // Buckets with more labels than `le` belong to families read by nobody here.
                continue;
            };
            let le = parse_le(le).map_err(bad)?;
            let count = parse_count(value).map_err(bad)?;
            out.entry(name.to_string())
                .or_default()
                .buckets
                .push((le, count));
        } else if let Some(name) = series.strip_suffix("_count") {
            if let Some(h) = out.get_mut(name) {
                h.count = parse_count(value).map_err(bad)?;
            }
        }
    }
    for h in out.values_mut() {
        // `+Inf` last; the exposition format lists buckets in order, but do not rely on it.
        h.buckets.sort_by_key(|(le, _)| (le.is_none(), *le));
        if h.count == 0 {
            h.count = h.buckets.last().map_or(0, |(_, c)| *c);
        }
    }
    Ok(out)
}

/// The histograms read.
pub const COMMIT: &str = "tenure_commit_latency_seconds";
/// Keepalive receive to acknowledgement.
pub const KEEPALIVE: &str = "tenure_lease_renewal_seconds";
/// Write-ahead log write plus fsync.
pub const FSYNC: &str = "tenure_fsync_seconds";
/// Time without a known Raft leader.
pub const FAILOVER: &str = "tenure_failover_seconds";
/// Time since a session's previous keepalive, at renewal.
pub const LEASE_AGE: &str = "tenure_lease_age_at_renewal_seconds";

/// What a node's metrics give: values for inputs, each with how it was measured, and notes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Measured {
    /// `(input, value, how)`, to be set with [`crate::Source::Measured`].
    pub values: Vec<(Input, Value, String)>,
    /// What else was seen, and what could not be measured and why.
    pub notes: Vec<String>,
}

fn p99_text(name: &str, h: &Histogram, bound: Duration) -> String {
    format!(
        "p99 of {name} ≤ {} ({} sample{}; an upper bound from its buckets)",
        human(bound),
        h.count,
        if h.count == 1 { "" } else { "s" }
    )
}

/// Inputs from the text of a node's `/metrics` and the number of voters its `/status`
/// lists (if it answered).
pub fn measure(metrics_text: &str, voters: Option<u64>) -> Result<Measured> {
    let hs = histograms(metrics_text)?;
    let mut m = Measured::default();
    let p99 = |name: &str, m: &mut Measured| -> Option<(Duration, String)> {
        let Some(h) = hs.get(name) else {
            m.notes.push(format!("{name} is not exported by this node"));
            return None;
        };
        match h.p99() {
            Quantile::AtMost(bound) => Some((bound, p99_text(name, h, bound))),
            Quantile::NoSamples => {
                let why = if name == COMMIT {
                    " (proposals are timed where they are made: point --from at the leader's HTTP port)"
                } else if name == KEEPALIVE {
                    " (keepalives are timed by the leader, while holders renew)"
                } else {
                    ""
                };
                m.notes
                    .push(format!("{name} has no samples on this node{why}"));
                None
            }
            Quantile::Above(largest) => {
                m.notes.push(format!(
                    "the p99 of {name} is above its largest bucket, {}: not used",
                    human(largest)
                ));
                None
            }
        }
    };
    let commit = p99(COMMIT, &mut m);
    let keepalive = p99(KEEPALIVE, &mut m);
    let network = match (&commit, &keepalive) {
        (Some(c), Some(k)) => Some(if k.0 > c.0 { k.clone() } else { c.clone() }),
        (Some(c), None) => Some(c.clone()),
        (None, Some(k)) => Some(k.clone()),
        (None, None) => None,
    };
    if let Some((d, how)) = network {
        m.values.push((Input::NetworkP99, Value::Duration(d), how));
    }
    if let Some((d, how)) = &commit {
        m.values.push((
            Input::Campaign,
            Value::Duration(*d * 2),
            format!("2 × {how}: pre-vote and vote"),
        ));
    }
    for (name, what) in [
        (FSYNC, "fsync"),
        (FAILOVER, "failovers seen by this node"),
        (LEASE_AGE, "renewal gaps of this node's holders"),
    ] {
        if let Some((_, how)) = p99(name, &mut m) {
            m.notes.push(format!("{what}: {how}"));
        }
    }
    if let Some(v) = voters.filter(|v| *v > 0) {
        m.values.push((
            Input::ClusterSize,
            Value::Count(v),
            "the voters in /status".to_string(),
        ));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP tenure_commit_latency_seconds Proposal to apply on the proposing node.
# TYPE tenure_commit_latency_seconds histogram
tenure_commit_latency_seconds_bucket{le=\"0.0001\"} 0
tenure_commit_latency_seconds_bucket{le=\"0.00025\"} 0
tenure_commit_latency_seconds_bucket{le=\"0.001\"} 10
tenure_commit_latency_seconds_bucket{le=\"0.002\"} 98
tenure_commit_latency_seconds_bucket{le=\"0.005\"} 100
tenure_commit_latency_seconds_bucket{le=\"+Inf\"} 100
tenure_commit_latency_seconds_sum 0.15
tenure_commit_latency_seconds_count 100
tenure_lease_renewal_seconds_bucket{le=\"0.0005\"} 3
tenure_lease_renewal_seconds_bucket{le=\"+Inf\"} 3
tenure_lease_renewal_seconds_count 3
tenure_fsync_seconds_bucket{le=\"0.001\"} 0
tenure_fsync_seconds_bucket{le=\"+Inf\"} 0
tenure_fsync_seconds_count 0
tenure_failover_seconds_bucket{le=\"5\"} 0
tenure_failover_seconds_bucket{le=\"+Inf\"} 2
tenure_failover_seconds_count 2
tenure_peer_connected{peer=\"2\"} 1
";

    #[test]
    fn p99_is_the_bound_of_the_bucket_that_holds_it() {
        let hs = histograms(TEXT).unwrap();
        // 99 of 100 samples: the 98 at or below 2 ms are not enough, 5 ms holds the 99th.
        assert_eq!(hs[COMMIT].p99(), Quantile::AtMost(Duration::from_millis(5)));
        assert_eq!(
            hs[KEEPALIVE].p99(),
            Quantile::AtMost(Duration::from_micros(500))
        );
        assert_eq!(hs[FSYNC].p99(), Quantile::NoSamples);
        assert_eq!(hs[FAILOVER].p99(), Quantile::Above(Duration::from_secs(5)));
    }

    #[test]
    fn measure_takes_the_network_and_campaign_from_the_commit_latency() {
        let m = measure(TEXT, Some(3)).unwrap();
        let by: BTreeMap<Input, Value> = m.values.iter().map(|(i, v, _)| (*i, *v)).collect();
        assert_eq!(
            by[&Input::NetworkP99],
            Value::Duration(Duration::from_millis(5))
        );
        assert_eq!(
            by[&Input::Campaign],
            Value::Duration(Duration::from_millis(10))
        );
        assert_eq!(by[&Input::ClusterSize], Value::Count(3));
        assert!(
            m.values[0].2.contains("an upper bound from its buckets"),
            "{:?}",
            m.values
        );
        assert!(m
            .notes
            .iter()
            .any(|n| n.contains("tenure_fsync_seconds has no samples")));
        assert!(m
            .notes
            .iter()
            .any(|n| n.contains("above its largest bucket, 5 s")));
        assert!(m
            .notes
            .iter()
            .any(|n| n.contains("tenure_lease_age_at_renewal_seconds is not exported")));
    }

    #[test]
    fn malformed_buckets_are_refused_with_their_line() {
        let e = histograms("x_bucket{le=\"1e-3\"} 4\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read the metrics: line 1: bucket bound \"1e-3\" is not a number of seconds"
        );
        let e = histograms("x_bucket{le=\"0.5\"} four\n").unwrap_err();
        assert!(e.to_string().contains("line 1: count \"four\""), "{e}");
        assert_eq!(parse_le("2.5"), Ok(Some(Duration::from_millis(2_500))));
        assert_eq!(parse_le("0.0001"), Ok(Some(Duration::from_micros(100))));
    }

    #[test]
    fn a_node_with_no_commit_samples_says_where_to_look() {
        let text = TEXT.replace("_bucket{le=\"0.001\"} 10", "_bucket{le=\"0.001\"} 0");
        let text = text
            .lines()
            .map(|l| {
                if l.starts_with(COMMIT) && !l.contains("0.0001") {
                    let (series, _) = l.rsplit_once(' ').unwrap();
                    format!("{series} 0")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let m = measure(&text, None).unwrap();
        assert!(m.values.iter().all(|(i, _, _)| *i != Input::Campaign));
        assert!(m
            .notes
            .iter()
            .any(|n| n.contains("point --from at the leader's HTTP port")));
    }
}
