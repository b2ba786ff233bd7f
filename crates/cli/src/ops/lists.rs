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
    let mut header = true;
    let mut table = Table::default();
    loop {
        let (addr, page) = admin
            .elections_page(node.as_deref(), &after, args.limit)
            .await?;
        node = Some(addr);
        if args.target.json {
            let lines: Vec<String> = page.elections.iter().map(election_json).collect();
            print_lines(&lines);
        } else {
            let mut rows = Vec::new();
            if header {
                rows.push(cells(&["TOKEN", "LEADER", "CANDIDATES", "SINCE", "NAME"]));
                header = false;
            }
            rows.extend(page.elections.iter().map(election_row));
            print_lines(&table.format(&rows));
        }
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

fn election_json(e: &v1::ElectionSummary) -> String {
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
    json!({
        "name": e.name,
        "leader": leader,
        "token": e.leader.as_ref().map(|l| l.token),
        "candidates": e.candidates,
        "since_index": e.since_index,
    })
    .to_string()
}

fn election_row(e: &v1::ElectionSummary) -> Vec<String> {
    let (token, leader) = match &e.leader {
        Some(l) => (l.token.to_string(), l.session_id.to_string()),
        None => ("-".into(), "none".into()),
    };
    let candidates = if e.candidates.is_empty() {
        "-".to_string()
    } else {
        e.candidates
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let since = if e.since_index == 0 {
        "-".to_string()
    } else {
        e.since_index.to_string()
    };
    vec![
        token,
        leader,
        candidates,
        since,
        lines::escape_value(e.name.as_bytes()),
    ]
}

fn cells(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Columns that line up across the pages of a walk: each is as wide as the widest cell seen
/// so far (pages are printed as they arrive, so a later page can only widen what follows).
/// The last column is not padded.
#[derive(Default)]
struct Table {
    widths: Vec<usize>,
}

impl Table {
    fn format(&mut self, rows: &[Vec<String>]) -> Vec<String> {
        for row in rows {
            for (i, cell) in row.iter().enumerate() {
                let w = cell.chars().count();
                match self.widths.get_mut(i) {
                    Some(width) => *width = (*width).max(w),
                    None => self.widths.push(w),
                }
            }
        }
        rows.iter()
            .map(|row| {
                let last = row.len().saturating_sub(1);
                row.iter()
                    .enumerate()
                    .map(|(i, cell)| {
                        if i == last {
                            cell.clone()
                        } else {
                            format!("{cell:<width$}", width = self.widths[i])
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("  ")
            })
            .collect()
    }
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
    let mut header = true;
    let mut table = Table::default();
    loop {
        let (addr, page) = admin
            .sessions_page(node.as_deref(), after, args.limit)
            .await?;
        node = Some(addr);
        if args.target.json {
            let lines: Vec<String> = page
                .sessions
                .iter()
                .map(|s| {
                    json!({
                        "id": s.id,
                        "ttl_ms": s.ttl_ms,
                        "remaining_ms": s.remaining_ms,
                        "elections": s.elections,
                    })
                    .to_string()
                })
                .collect();
            print_lines(&lines);
        } else {
            let mut rows = Vec::new();
            if header {
                rows.push(cells(&["ID", "TTL", "EXPIRES_IN", "ELECTIONS"]));
                header = false;
            }
            rows.extend(page.sessions.iter().map(|s| {
                let elections = s
                    .elections
                    .iter()
                    .map(|e| lines::escape_value(e.as_bytes()))
                    .collect::<Vec<_>>()
                    .join(" ");
                vec![
                    s.id.to_string(),
                    human_ms(s.ttl_ms),
                    human_ms(s.remaining_ms),
                    if elections.is_empty() {
                        "-".into()
                    } else {
                        elections
                    },
                ]
            }));
            print_lines(&table.format(&rows));
        }
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
