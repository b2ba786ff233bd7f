//! The health of a cluster as `tenure status` judges it, from every member's own status.

use tenure_proto::v1;

/// One member as `tenure status` shows it.
#[derive(Clone, Debug)]
pub struct MemberView {
    /// The member, as the member list has it.
    pub member: v1::Member,
    /// Its own answer, or why there is none.
    pub status: Result<v1::StatusResponse, String>,
    /// Entries behind the leader's log (the leader's view), when a leader answered.
    pub lag: Option<u64>,
    /// Milliseconds since the leader last heard from it (`None`: the leader itself, no
    /// leader answered, or not heard from in this term).
    pub last_contact_ms: Option<u64>,
    /// `ok`, `unreachable`, `lagging` or `no-leader`.
    pub health: &'static str,
}

/// The leader, as the members' own statuses say: the one that says it leads, in the highest
/// term any claims (a member cut off from the cluster may still claim an older one).
pub fn leader_claim<'a>(
    statuses: impl IntoIterator<Item = &'a v1::StatusResponse>,
) -> Option<&'a v1::StatusResponse> {
    statuses
        .into_iter()
        .filter(|s| s.role == "leader")
        .max_by_key(|s| s.term)
}

/// Every member's view, the leader's id and the warnings, from the statuses gathered
/// ([`super::ClusterStatus`]): a member more than `lag_max` entries behind the leader, or
/// not heard from by it for more than `contact_max_ms`, is lagging; an even number of
/// voters, each unreachable or lagging member, no leader and more than one leader in a term
/// are warned about.
pub fn assess(
    members: Vec<v1::Member>,
    statuses: Vec<Result<v1::StatusResponse, String>>,
    lag_max: u64,
    contact_max_ms: u64,
) -> (Vec<MemberView>, Option<u64>, Vec<String>) {
    let leader = leader_claim(statuses.iter().filter_map(|s| s.as_ref().ok())).cloned();
    let mut warnings = Vec::new();
    let voters = members.iter().filter(|m| m.voter).count();
    if voters % 2 == 0 {
        warnings.push(format!(
            "{voters} voters: an even number tolerates no more failures than {} voters would (a majority is {}); use an odd number",
            voters.saturating_sub(1),
            voters / 2 + 1
        ));
    }
    match &leader {
        None => warnings.push("no reachable member leads".to_string()),
        Some(l) => {
            let claims = statuses
                .iter()
                .filter_map(|s| s.as_ref().ok())
                .filter(|s| s.role == "leader" && s.term == l.term)
                .count();
            if claims > 1 {
                warnings.push(format!("{claims} members claim to lead term {}", l.term));
            }
        }
    }
    let mut views = Vec::new();
    for (member, status) in members.into_iter().zip(statuses) {
        let (lag, last_contact_ms) = match &leader {
            Some(l) if l.id == member.id => (Some(0), None),
            Some(l) => match l.peers.iter().find(|p| p.id == member.id) {
                Some(p) => (
                    Some(l.last_index.saturating_sub(p.match_index)),
                    p.last_contact_ms,
                ),
                None => (None, None),
            },
            None => (None, None),
        };
        let health = match &status {
            Err(e) => {
                warnings.push(format!(
                    "member {} is unreachable ({}): {e}",
                    member.id,
                    if member.client_addr.is_empty() {
                        "no known client address"
                    } else {
                        &member.client_addr
                    }
                ));
                "unreachable"
            }
            Ok(_) if lag.is_some_and(|l| l > lag_max) => {
                warnings.push(format!(
                    "member {} is lagging: {} entries behind the leader (--lag-max {lag_max})",
                    member.id,
                    lag.unwrap_or(0)
                ));
                "lagging"
            }
            Ok(_)
                if leader.as_ref().is_some_and(|l| l.id != member.id)
                    && last_contact_ms.is_none_or(|c| c > contact_max_ms) =>
            {
                warnings.push(match last_contact_ms {
                    Some(c) => format!(
                        "member {} is lagging: the leader last heard from it {} ago",
                        member.id,
                        human_ms(c)
                    ),
                    None => format!(
                        "member {} is lagging: the leader has not heard from it in this term",
                        member.id
                    ),
                });
                "lagging"
            }
            Ok(s) if s.leader_id == 0 => "no-leader",
            Ok(_) => "ok",
        };
        views.push(MemberView {
            member,
            status,
            lag,
            last_contact_ms,
            health,
        });
    }
    (views, leader.map(|l| l.id), warnings)
}

/// A duration in milliseconds for people: `850ms`, `1.5s`, `2m3s`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let s = format!("{:.1}", ms as f64 / 1000.0);
        format!("{}s", s.trim_end_matches(".0"))
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, voter: bool) -> v1::Member {
        v1::Member {
            id,
            voter,
            client_addr: format!("127.0.0.1:{}", 8000 + id),
            ..Default::default()
        }
    }

    fn status(id: u64, role: &str, term: u64, leader: u64) -> v1::StatusResponse {
        v1::StatusResponse {
            id,
            role: role.into(),
            term,
            leader_id: leader,
            last_index: 50,
            ..Default::default()
        }
    }

    #[test]
    fn status_warns_about_even_voters_unreachable_and_lagging_members() {
        let mut leader = status(1, "leader", 5, 1);
        leader.peers = vec![
            v1::PeerProgress {
                id: 2,
                match_index: 50,
                last_contact_ms: Some(20),
            },
            v1::PeerProgress {
                id: 3,
                match_index: 10,
                last_contact_ms: Some(20),
            },
            v1::PeerProgress {
                id: 4,
                match_index: 50,
                last_contact_ms: Some(9_000),
            },
        ];
        let members = vec![
            member(1, true),
            member(2, true),
            member(3, true),
            member(4, true),
        ];
        let statuses = vec![
            Ok(leader),
            Ok(status(2, "follower", 5, 1)),
            Ok(status(3, "follower", 5, 1)),
            Err("connection refused".to_string()),
        ];
        let (views, leader, warnings) = assess(members, statuses, 30, 2_000);
        assert_eq!(leader, Some(1));
        let health: Vec<_> = views.iter().map(|v| v.health).collect();
        assert_eq!(health, ["ok", "ok", "lagging", "unreachable"]);
        assert_eq!(views[2].lag, Some(40));
        assert_eq!(views[1].last_contact_ms, Some(20));
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("4 voters"), "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("member 3 is lagging")));
        assert!(warnings
            .iter()
            .any(|w| w.contains("member 4 is unreachable")));

        // Three voters in step: nothing to warn about; with no leader, that is said.
        let (_, _, warnings) = assess(
            vec![
                member(1, true),
                member(2, true),
                member(3, true),
                member(4, false),
            ],
            vec![
                Ok(status(1, "follower", 2, 0)),
                Ok(status(2, "follower", 2, 0)),
                Ok(status(3, "follower", 2, 0)),
                Ok(status(4, "learner", 2, 0)),
            ],
            30,
            2_000,
        );
        assert_eq!(warnings, ["no reachable member leads"]);
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(human_ms(0), "0ms");
        assert_eq!(human_ms(999), "999ms");
        assert_eq!(human_ms(1000), "1s");
        assert_eq!(human_ms(1500), "1.5s");
        assert_eq!(human_ms(125_000), "2m5s");
    }
}
