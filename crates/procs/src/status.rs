//! A node's `/status`, and the wait until a set of nodes agrees on one leader.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::Deserialize;
use tenure_transport::http::HttpClient;

/// How long one `/status` may take before the node counts as not answering.
pub const STATUS_TIMEOUT: Duration = Duration::from_millis(500);

/// What a harness reads of a node's `/status` JSON.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct NodeStatus {
    /// The node's id.
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `learner`, …
    pub role: String,
    /// Its term.
    pub term: u64,
    /// The leader it knows; 0 when none.
    pub leader: u64,
    /// That leader's client address, when known.
    #[serde(default)]
    pub leader_addr: Option<String>,
    /// Its commit index.
    pub commit_index: u64,
    /// Its applied index.
    pub applied_index: u64,
    /// The voters it knows.
    pub voters: Vec<u64>,
    /// The learners it knows.
    #[serde(default)]
    pub learners: Vec<u64>,
    /// Live sessions.
    #[serde(default)]
    pub sessions: usize,
}

impl NodeStatus {
    /// Whether the node says it leads.
    pub fn is_leader(&self) -> bool {
        self.role == "leader"
    }
}

/// `/status` at the HTTP address `addr`, or `None` if it does not answer 200 with a status
/// within `within`.
pub async fn status(http: &HttpClient, addr: SocketAddr, within: Duration) -> Option<NodeStatus> {
    match http.get(addr, "/status", within).await {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// Wait until every node of `among` (id and HTTP address) answers, all name one leader in
/// one term, that leader is one of them and says it leads; returns `(leader, term)`. Fails
/// after `within` with the last statuses seen.
pub async fn wait_for_leader(
    http: &HttpClient,
    among: &[(u64, SocketAddr)],
    within: Duration,
) -> anyhow::Result<(u64, u64)> {
    let deadline = Instant::now() + within;
    loop {
        let mut seen = Vec::new();
        for &(id, addr) in among {
            seen.push((id, status(http, addr, STATUS_TIMEOUT).await));
        }
        if let Some(agreed) = agreed_leader(&seen) {
            return Ok(agreed);
        }
        if Instant::now() > deadline {
            let ids: Vec<u64> = among.iter().map(|(id, _)| *id).collect();
            bail!("nodes {ids:?} agree on no leader within {within:?}; last statuses: {seen:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The leader and term that every status of `seen` names, if all answered, they agree, and
/// the leader is among them and says it leads.
pub fn agreed_leader(seen: &[(u64, Option<NodeStatus>)]) -> Option<(u64, u64)> {
    let named: BTreeSet<(u64, u64)> = seen
        .iter()
        .map(|(_, s)| s.as_ref().map(|s| (s.leader, s.term)))
        .collect::<Option<_>>()?;
    let &(leader, term) = named.iter().next().filter(|_| named.len() == 1)?;
    let leader_says = seen
        .iter()
        .find(|(id, _)| *id == leader)
        .and_then(|(_, s)| s.as_ref());
    (leader != 0 && leader_says.is_some_and(NodeStatus::is_leader)).then_some((leader, term))
}

/// One value of a Prometheus text exposition: the first sample named exactly `name`
/// (labels included, as in `tenure_fsync_seconds_count` or `x{a="b"}`).
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(id: u64, role: &str, term: u64, leader: u64) -> Option<NodeStatus> {
        Some(NodeStatus {
            id,
            role: role.into(),
            term,
            leader,
            leader_addr: None,
            commit_index: 0,
            applied_index: 0,
            voters: vec![1, 2, 3],
            learners: Vec::new(),
            sessions: 0,
        })
    }

    #[test]
    fn a_leader_is_agreed_only_when_everyone_answers_alike_and_it_says_so() {
        let all = vec![(1, st(1, "leader", 4, 1)), (2, st(2, "follower", 4, 1))];
        assert_eq!(agreed_leader(&all), Some((1, 4)));
        let silent = vec![(1, st(1, "leader", 4, 1)), (2, None)];
        assert_eq!(agreed_leader(&silent), None);
        let split = vec![(1, st(1, "leader", 4, 1)), (2, st(2, "follower", 5, 0))];
        assert_eq!(agreed_leader(&split), None);
        let stale = vec![(1, st(1, "follower", 4, 1)), (2, st(2, "follower", 4, 1))];
        assert_eq!(
            agreed_leader(&stale),
            None,
            "node 1 is named but does not lead"
        );
        let outside = vec![(2, st(2, "follower", 4, 1)), (3, st(3, "follower", 4, 1))];
        assert_eq!(
            agreed_leader(&outside),
            None,
            "the leader must be among them"
        );
        let none = vec![(2, st(2, "follower", 4, 0))];
        assert_eq!(agreed_leader(&none), None);
    }

    #[test]
    fn metric_values_are_found_by_their_whole_name() {
        let text = "# HELP x\nx_total 3\nx 7.5\ny{a=\"b\"} 2\n";
        assert_eq!(metric_value(text, "x"), Some(7.5));
        assert_eq!(metric_value(text, "y{a=\"b\"}"), Some(2.0));
        assert_eq!(metric_value(text, "z"), None);
    }
}
