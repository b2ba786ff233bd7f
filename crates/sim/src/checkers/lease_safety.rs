//! Lease safety on the holder — DESIGN rule 4: "a client treats its leadership as valid only
//! until send time of its last acknowledged keepalive + TTL − drift margin, measured on its
//! own monotonic clock … so a holder stops believing before anyone else can be granted the
//! election, as long as clock rates differ by less than the configured drift bound".
//!
//! Property: at no simulated instant do two clients believe they lead the same election.
//! A belief is an interval of *true* simulated time: from the moment a client concludes it
//! leads until the true time at which its own drifting clock reaches its lease deadline, or
//! until it stops believing (resign, transfer, session ended, another leader seen). Two
//! intervals overlap exactly when one starts (or is extended) while the other is running, so
//! checking at every start and extension is complete.

use std::collections::BTreeMap;

use super::{Checker, View};
use crate::observe::{ClientId, Observation};
use crate::time::{fmt_time, SimTimeUs};

#[derive(Clone, Debug)]
struct Belief {
    election: String,
    token: u64,
    since_us: SimTimeUs,
    until_us: SimTimeUs,
}

/// What every client currently believes.
#[derive(Default)]
pub struct LeaseSafety {
    beliefs: BTreeMap<ClientId, Belief>,
}

impl Checker for LeaseSafety {
    fn name(&self) -> &'static str {
        "lease-safety"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        let Observation::Belief {
            client,
            election,
            token,
            until_us,
        } = observation
        else {
            return None;
        };
        let now = view.now_us;
        let Some(until_us) = until_us else {
            self.beliefs.remove(client);
            return None;
        };
        if *until_us <= now {
            self.beliefs.remove(client);
            return None;
        }
        let since_us = match self.beliefs.get(client) {
            Some(b) if b.election == *election && b.token == *token && b.until_us > now => {
                b.since_us
            }
            _ => now,
        };
        for (other, b) in &self.beliefs {
            if other != client && b.election == *election && b.until_us > now {
                return Some(format!(
                    "clients {other} and {client} both believe they lead {election:?} at {}: client {other} with token {} since {} until {}, client {client} with token {token} until {}",
                    fmt_time(now),
                    b.token,
                    fmt_time(b.since_us),
                    fmt_time(b.until_us),
                    fmt_time(*until_us)
                ));
            }
        }
        self.beliefs.insert(
            *client,
            Belief {
                election: election.clone(),
                token: *token,
                since_us,
                until_us: *until_us,
            },
        );
        None
    }
}
