//! Per-principal quotas at the API edge.
//!
//! What a principal may *hold* (sessions, elections, fenced keys and their bytes) is counted
//! by the replicated state machine: the edge wraps each client command in
//! [`Command::Charged`] with the caller's principal and its quota (the auth file's
//! `quotas`, else the server's `*_per_principal_max`), so every replica refuses the same
//! command past the same figure. What a principal may *do* per second is this node's
//! business: a token bucket per principal, refilled at its `requests_per_second` and holding
//! at most one second of it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tenure_core::sm::{Command, Quota};

use crate::auth;
use crate::config::ServerConfig;

/// The quota `quotas` (from the auth file) sets, with the server's defaults for the rest.
pub fn quota(config: &ServerConfig, quotas: &auth::Quotas) -> Quota {
    Quota {
        sessions: quotas.sessions.unwrap_or(config.sessions_per_principal_max),
        elections: quotas
            .elections
            .unwrap_or(config.elections_per_principal_max),
        keys: quotas.keys.unwrap_or(config.keys_per_principal_max),
        key_bytes: quotas
            .key_bytes
            .unwrap_or(config.key_bytes_per_principal_max),
    }
}

/// `command` charged to `principal` under `quota`.
pub fn charged(principal: &str, quota: Quota, command: Command) -> Command {
    Command::Charged {
        principal: principal.to_owned(),
        quota,
        command: Box::new(command),
    }
}

/// One principal's calls-per-second budget.
struct Bucket {
    /// Calls it may make now (fractions accrue).
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

/// Every authenticated principal's budget on this node. Only principals that proved who
/// they are get a bucket, so the map is bounded by the principals the CA and the auth file
/// know, not by what anonymous clients send.
#[derive(Default)]
pub struct Rates {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Rates {
    /// Takes one call from `principal`'s budget of `per_second`: `Err` with the budget when
    /// it is spent (nothing is taken then).
    pub fn admit(&self, principal: &str, per_second: u32) -> Result<(), u32> {
        let now = Instant::now();
        let rate = f64::from(per_second.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.entry(principal.to_owned()).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let elapsed = now.duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return Err(per_second);
        }
        bucket.tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_allows_one_second_of_calls_at_once_and_refills_at_its_rate() {
        let rates = Rates::default();
        for _ in 0..10 {
            assert_eq!(rates.admit("a", 10), Ok(()));
        }
        assert_eq!(rates.admit("a", 10), Err(10));
        // Another principal has its own budget.
        assert_eq!(rates.admit("b", 10), Ok(()));
        std::thread::sleep(std::time::Duration::from_millis(250));
        // A quarter of a second refills about two calls, not ten.
        let admitted = (0..10).filter(|_| rates.admit("a", 10).is_ok()).count();
        assert!((1..=4).contains(&admitted), "{admitted}");
    }
}
