//! `tenure elections` and `tenure sessions`: the applied state, page by page.

use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Value};
use tenure::admin::health::human_ms;
use tenure::admin::Failure;
use tenure::lines;
use tenure_proto::v1;

use super::{connect, report, Target};
use crate::common::{block_on, log, print_lines};
/// `tenure elections` and `tenure sessions`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: Target,
    /// Entries per page asked of the server (default: the server's, 100; it caps it at 1000).
    #[arg(long, default_value_t = 0)]
    limit: u32,
    /// Start after this key (an election name, or a session id); it need not exist.
    #[arg(long)]
    after: Option<String>,
    /// Print one page only (stderr then says where the next one starts), instead of
    /// walking all of them.
    #[arg(long)]
    one_page: bool,
}

/// `tenure elections`.
pub fn elections(args: ListArgs) -> ExitCode {
    block_on(async move {
        match elections_inner(&args).await {
            Ok(()) => 0,
            Err(f) => report(&f, "cannot list the elections"),
        }
    })
}

async fn elections_inner(args: &ListArgs) -> Result<(), Failure> {
    let admin = connect(&args.target)?;
    let mut after = args.after.clone().unwrap_or_default();
    // Every page from the same node, so that the walk sees one replica's state.
    let mut node: Option<String> = None;
    let mut header = !args.target.json;
    loop {
        let (addr, page) = admin
            .elections_page(node.as_deref(), &after, args.limit)
            .await?;
        node = Some(addr);
        let mut lines = Vec::new();
        if header {
            lines.push("TOKEN  LEADER  CANDIDATES  SINCE  NAME".to_string());
            header = false;
        }
        for e in &page.elections {
            lines.push(election_line(e, args.target.json));
        }
        print_lines(&lines);
        let Some(last) = page.elections.last() else {
            break;
        };
        if !page.more {
            break;
        }
        after = last.name.clone();
        if args.one_page {
            log(&format!(
                "more elections follow: --after '{}'",
                lines::escape_value(after.as_bytes())
            ));
            break;
        }
    }
    Ok(())
}

fn election_line(e: &v1::ElectionSummary, json: bool) -> String {
    let candidates = e
        .candidates
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if json {
        let leader = match &e.leader {
            Some(l) => {
                let mut o = json!({ "session": l.session_id, "token": l.token });
                o["value"] = std::str::from_utf8(&l.value).map_or(Value::Null, Value::from);
                o["value_base64"] = {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .encode(&l.value)
                        .into()
                };
                o
            }
            None => Value::Null,
        };
        return json!({
            "name": e.name,
            "leader": leader,
            "token": e.leader.as_ref().map(|l| l.token),
            "candidates": e.candidates,
            "since_index": e.since_index,
        })
        .to_string();
    }
    let (token, leader) = match &e.leader {
        Some(l) => (l.token.to_string(), l.session_id.to_string()),
        None => ("-".into(), "none".into()),
    };
    let candidates = if candidates.is_empty() {
        "-".to_string()
    } else {
        candidates
    };
    let since = if e.since_index == 0 {
        "-".to_string()
    } else {
        e.since_index.to_string()
    };
    format!(
        "{token:<5}  {leader:<6}  {candidates:<10}  {since:<5}  {}",
        lines::escape_value(e.name.as_bytes())
    )
}

/// `tenure sessions`.
pub fn sessions(args: ListArgs) -> ExitCode {
    block_on(async move {
        match sessions_inner(&args).await {
            Ok(()) => 0,
            Err(f) => report(&f, "cannot list the sessions"),
        }
    })
}

async fn sessions_inner(args: &ListArgs) -> Result<(), Failure> {
    let mut after: u64 = match &args.after {
        None => 0,
        Some(a) => a
            .parse()
            .map_err(|_| Failure::Usage(format!("--after {a:?}: a session id is a number")))?,
    };
    let admin = connect(&args.target)?;
    let mut node: Option<String> = None;
    let mut header = !args.target.json;
    loop {
        let (addr, page) = admin
            .sessions_page(node.as_deref(), after, args.limit)
            .await?;
        node = Some(addr);
        let mut lines = Vec::new();
        if header {
            lines.push("ID  TTL  REMAINING  ELECTIONS".to_string());
            header = false;
        }
        for s in &page.sessions {
            lines.push(if args.target.json {
                json!({
                    "id": s.id,
                    "ttl_ms": s.ttl_ms,
                    "remaining_ms": s.remaining_ms,
                    "elections": s.elections,
                })
                .to_string()
            } else {
                let elections = s
                    .elections
                    .iter()
                    .map(|e| lines::escape_value(e.as_bytes()))
                    .collect::<Vec<_>>()
                    .join(" ");
                format!(
                    "{}  {}  {}  {}",
                    s.id,
                    human_ms(s.ttl_ms),
                    human_ms(s.remaining_ms),
                    if elections.is_empty() {
                        "-".into()
                    } else {
                        elections
                    }
                )
            });
        }
        print_lines(&lines);
        let Some(last) = page.sessions.last() else {
            break;
        };
        if !page.more {
            break;
        }
        after = last.id;
        if args.one_page {
            log(&format!("more sessions follow: --after {after}"));
            break;
        }
    }
    Ok(())
}
