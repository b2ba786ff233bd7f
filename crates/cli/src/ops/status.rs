//! `tenure status`: every member's own status, and the health judgement of `tenure::admin`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};
use tenure::admin::health::{assess, human_ms, MemberView};
use tenure::admin::{ClusterStatus, Failure};
use tenure::lines;

use super::{connect, or_dash, report, Target, EXIT_WARNING};
use crate::common::{block_on, parse_duration, print_lines, table};
/// `tenure status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// A member more than this many log entries behind the leader is lagging.
    #[arg(long, default_value_t = 1000)]
    lag_max: u64,
    /// A member the leader has not heard from for longer than this is lagging (e.g. `2s`).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    contact_max: Duration,
}

/// `tenure status`.
pub fn status(args: StatusArgs) -> ExitCode {
    block_on(async move {
        match status_inner(&args).await {
            Ok(code) => code,
            Err(f) => report(&f, "cannot read the cluster's status"),
        }
    })
}

async fn status_inner(args: &StatusArgs) -> Result<u8, Failure> {
    let ClusterStatus {
        first,
        members,
        statuses,
    } = connect(&args.target)?.statuses().await?;
    let contact_max_ms = args.contact_max.as_millis() as u64;
    let (views, leader, warnings) = assess(members, statuses, args.lag_max, contact_max_ms);
    let mut lines = Vec::new();
    // What the caller's principal holds, as the first node that answered applied it.
    let usage: Vec<Value> = first
        .usage
        .iter()
        .map(|u| {
            json!({
                "principal": u.principal,
                "sessions": u.sessions, "sessions_max": u.sessions_max,
                "elections": u.elections, "elections_max": u.elections_max,
                "keys": u.keys, "keys_max": u.keys_max,
                "key_bytes": u.key_bytes, "key_bytes_max": u.key_bytes_max,
            })
        })
        .collect();
    if args.target.json {
        let members: Vec<Value> = views.iter().map(member_json).collect();
        lines.push(
            json!({ "leader": leader, "members": members, "warnings": warnings, "usage": usage })
                .to_string(),
        );
    } else {
        let dash = || "-".to_string();
        let rows: Vec<Vec<String>> = views
            .iter()
            .map(|v| {
                let s = v.status.as_ref().ok();
                vec![
                    v.member.id.to_string(),
                    s.map_or_else(
                        || if v.member.voter { "voter?" } else { "learner?" }.to_string(),
                        |s| {
                            if v.member.voter || s.role == "leader" {
                                s.role.clone()
                            } else {
                                format!("{} (learner)", s.role)
                            }
                        },
                    ),
                    s.map_or_else(dash, |s| s.term.to_string()),
                    s.map_or_else(dash, |s| match s.leader_id {
                        0 => "none".into(),
                        l => l.to_string(),
                    }),
                    s.map_or_else(dash, |s| s.commit_index.to_string()),
                    s.map_or_else(dash, |s| s.applied_index.to_string()),
                    v.lag.map_or_else(dash, |l| l.to_string()),
                    v.last_contact_ms.map_or_else(dash, human_ms),
                    v.health.to_string(),
                    s.map_or_else(dash, |s| s.version.clone()),
                    or_dash(&v.member.client_addr),
                    or_dash(&v.member.peer_addr),
                    or_dash(&v.member.http_addr),
                ]
            })
            .collect();
        lines = table(
            &[
                "ID", "ROLE", "TERM", "LEADER", "COMMIT", "APPLIED", "LAG", "CONTACT", "HEALTH",
                "VERSION", "CLIENT", "PEER", "HTTP",
            ],
            &rows,
        );
        for u in &first.usage {
            lines.push(format!(
                "usage of {}: sessions {}/{}, elections {}/{}, keys {}/{}, key bytes {}/{}",
                lines::escape_value(u.principal.as_bytes()),
                u.sessions,
                u.sessions_max,
                u.elections,
                u.elections_max,
                u.keys,
                u.keys_max,
                u.key_bytes,
                u.key_bytes_max
            ));
        }
        lines.extend(warnings.iter().map(|w| format!("warning: {w}")));
    }
    print_lines(&lines);
    Ok(if warnings.is_empty() { 0 } else { EXIT_WARNING })
}

fn member_json(v: &MemberView) -> Value {
    let m = &v.member;
    let mut o = json!({
        "id": m.id,
        "voter": m.voter,
        "peer_addr": m.peer_addr,
        "client_addr": m.client_addr,
        "http_addr": m.http_addr,
        "reachable": v.status.is_ok(),
        "lag": v.lag,
        "last_contact_ms": v.last_contact_ms,
        "health": v.health,
    });
    match &v.status {
        Ok(s) => {
            o["role"] = s.role.clone().into();
            o["term"] = s.term.into();
            o["leader"] = if s.leader_id == 0 {
                Value::Null
            } else {
                s.leader_id.into()
            };
            o["commit_index"] = s.commit_index.into();
            o["applied_index"] = s.applied_index.into();
            o["version"] = s.version.clone().into();
        }
        Err(e) => o["error"] = e.clone().into(),
    }
    o
}
