//! Election retention (`election_retention_ms`): while this node leads, an election that has
//! had no candidate for the retention period is deleted.
//!
//! The clock is this node's own and starts when it first sees the election empty: a new
//! leader starts counting afresh, so an election is kept at least the retention period
//! after it emptied, never less. The delete itself is the state machine's
//! `DeleteElection`, which refuses an election that has gained a candidate in the meantime
//! (`election-in-use`, nothing changed), and raises the token floor so that the election's
//! tokens never come back (docs/GUARANTEES.md "Tokens across a delete").

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tenure_core::node::Role;
use tenure_core::sm::Command;

use crate::driver::{ApiError, DriverHandle};

/// Elections listed per call while sweeping.
const PAGE: usize = 1_000;

/// Sweeps every quarter of `retention` (at most every ten seconds) until the driver goes.
pub async fn run(driver: DriverHandle, retention: Duration, timeout: Duration) {
    let every = (retention / 4).min(Duration::from_secs(10));
    let mut empty_since: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::time::sleep(every).await;
        if !driver.running.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if driver.published.borrow().status.role != Role::Leader {
            empty_since.clear();
            continue;
        }
        let Ok(empty) = empty_elections(&driver, timeout).await else {
            continue;
        };
        let now = Instant::now();
        // Forget elections that gained a candidate or are gone; start the clock of new ones.
        empty_since.retain(|name, _| empty.contains(name));
        for name in empty {
            let since = *empty_since.entry(name.clone()).or_insert(now);
            if now.duration_since(since) >= retention {
                let command = Command::DeleteElection {
                    election: name.clone(),
                };
                if let Ok((_, response)) = driver.propose(None, command, timeout).await {
                    tracing::info!(
                        event = "election_retention",
                        election = %name,
                        "election {name:?} had no candidate for {retention:?}: {response:?}"
                    );
                    empty_since.remove(&name);
                }
            }
        }
    }
}

/// The names of every election with no candidate, as this node applied them.
async fn empty_elections(
    driver: &DriverHandle,
    timeout: Duration,
) -> Result<std::collections::HashSet<String>, ApiError> {
    let mut empty = std::collections::HashSet::new();
    let mut after = String::new();
    loop {
        let page = driver
            .list_elections(after.clone(), PAGE, timeout)
            .await?
            .page;
        for (election, _) in &page.items {
            if election.leader.is_none() && election.candidates.is_empty() {
                empty.insert(election.name.clone());
            }
        }
        match page.items.last() {
            Some((last, _)) if page.more => after = last.name.clone(),
            _ => return Ok(empty),
        }
    }
}
