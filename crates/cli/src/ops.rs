//! The operator commands: `tenure status`, `tenure members list|add|promote|remove`,
//! `tenure transfer-leadership`, `tenure elections`, `tenure sessions`, `tenure get`,
//! `tenure put`, `tenure delete` and `tenure delete-election`.
//!
//! What they do is the client library's ([`tenure::admin`]: every member's status and the
//! health judgement, membership, transfers, the list pages; [`tenure::Client`] for fenced
//! keys); here are their arguments and their output. They take the same `--backend
//! tenure://…` URL as the script commands, with the same TLS files and bearer token
//! (`?ca=&cert=&key=&token_file=`, or `--ca/--cert/--key/--token-file`, or `$TENURE_CA`, …).
//!
//! Output follows [`crate::output`]: text for people, `--json` for scripts (one JSON
//! object per line, nothing else on stdout); names and values are escaped in text. Logs and
//! errors go to stderr. Exit codes: [`crate::common::exit_code`] (docs/CLI.md has the
//! table), and 1 when `status` printed a warning.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use tenure::admin::health::{assess, human_ms, MemberView};
use tenure::admin::{parse_member_spec, Admin, ClusterStatus, Failure, MemberChange};
use tenure_proto::v1;

use crate::common::{
    backend_url, block_on, exit_code, log, parse_duration, print_lines, table, Commands, TlsFlags,
};
use tenure::lines;

/// Exit code: `tenure status` printed at least one warning.
pub const EXIT_WARNING: u8 = 1;

/// Where the cluster is, and how to print.
#[derive(Debug, Args)]
pub struct Target {
    /// Backend URL (`tenure://h1:p[,h2:p…]`; one node is enough); default
    /// `$TENURE_BACKEND`, else `tenure://127.0.0.1:8001`. TLS:
    /// `tenure://…?ca=FILE[&cert=FILE&key=FILE][&token_file=FILE]`, or --ca/--cert/--key/
    /// --token-file (default `$TENURE_CA`, …) for a URL without a query.
    #[arg(long)]
    backend: Option<String>,
    #[command(flatten)]
    tls: TlsFlags,
    /// Print JSON Lines (one object per line) instead of text.
    #[arg(long)]
    json: bool,
}

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

/// `tenure members`.
#[derive(Debug, Args)]
pub struct MembersArgs {
    #[command(subcommand)]
    cmd: MembersCmd,
}

/// What `tenure members` does.
#[derive(Debug, Subcommand)]
enum MembersCmd {
    /// Print the members: id, voter or learner, peer, client and HTTP addresses.
    List(MembersList),
    /// Add a node (as a voter through joint consensus, or with --learner as a learner).
    ///
    /// `ID=PEER,CLIENT,HTTP` gives the new node's addresses (host:port each), which travel
    /// in the replicated membership; `ID` alone adds a node of the servers' static `--node`
    /// configuration.
    Add(MembersAdd),
    /// Make a learner a voter (through joint consensus).
    Promote(MembersOne),
    /// Remove a voter (through joint consensus) or a learner.
    Remove(MembersOne),
}

/// `tenure members list`.
#[derive(Debug, Args)]
struct MembersList {
    #[command(flatten)]
    target: Target,
}

/// `tenure members add`.
#[derive(Debug, Args)]
struct MembersAdd {
    #[command(flatten)]
    target: Target,
    /// `ID=PEER,CLIENT,HTTP`, or `ID` for a node the servers' `--node` flags name.
    spec: String,
    /// Add it as a learner (it receives the log but does not vote); `members promote` later.
    #[arg(long)]
    learner: bool,
}

/// `tenure members promote|remove`.
#[derive(Debug, Args)]
struct MembersOne {
    #[command(flatten)]
    target: Target,
    /// The node's id.
    id: u64,
}

/// `tenure transfer-leadership`.
#[derive(Debug, Args)]
pub struct TransferArgs {
    #[command(flatten)]
    target: Target,
    /// The voter to hand Raft leadership to; without it, the leader picks the voter whose
    /// log is most caught up.
    #[arg(long)]
    to: Option<u64>,
    /// How long to wait for the new leader to take over.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
}

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

/// `tenure get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    /// The fenced key.
    #[arg(value_name = "KEY")]
    fenced_key: String,
}

/// `tenure put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    /// The fenced key.
    #[arg(value_name = "KEY")]
    fenced_key: String,
    /// The value (any bytes).
    value: OsString,
    /// The election whose token guards the key.
    #[arg(long)]
    election: String,
    /// The writer's fencing token; default `$TENURE_FENCING_TOKEN` (set by `tenure run`).
    #[arg(long)]
    token: Option<u64>,
}

/// `tenure delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    target: Target,
    /// The fenced key.
    #[arg(value_name = "KEY")]
    fenced_key: String,
    /// The election whose token guards the key.
    #[arg(long)]
    election: String,
    /// The current leader's fencing token; default `$TENURE_FENCING_TOKEN`.
    #[arg(long)]
    token: Option<u64>,
}

/// `tenure delete-election`.
#[derive(Debug, Args)]
pub struct DeleteElectionArgs {
    #[command(flatten)]
    target: Target,
    /// The election.
    #[arg(value_name = "ELECTION")]
    election: String,
}

// ------------------------------------------------------------------------------------------
// Reaching the cluster.

/// Logs what failed and returns the exit code ([`exit_code`] of the error it stands for).
fn report(failure: &Failure, what: &str) -> u8 {
    match failure {
        Failure::Usage(m) => log(&format!("error: {m}")),
        Failure::Unreachable(m) => log(&format!("error: {what}: {m}")),
        Failure::Indeterminate(m) => log(&format!(
            "error: {what}: outcome unknown (it may or may not have taken effect): {m}"
        )),
        Failure::Refused(e) => match e.reason() {
            Some(reason) => log(&format!("error: {what}: {e} ({reason})")),
            None => log(&format!("error: {what}: {e}")),
        },
    }
    exit_code(&failure.error(), Commands::Operator)
}

fn connect(target: &Target) -> Result<Admin, Failure> {
    Admin::new(&backend_url(target.backend.as_deref(), &target.tls))
}

// ------------------------------------------------------------------------------------------
// tenure status

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

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
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

// ------------------------------------------------------------------------------------------
// tenure members

/// `tenure members`.
pub fn members(args: MembersArgs) -> ExitCode {
    block_on(async move {
        let (what, target) = match &args.cmd {
            MembersCmd::List(a) => ("cannot list the members", &a.target),
            MembersCmd::Add(a) => ("cannot add the member", &a.target),
            MembersCmd::Promote(a) => ("cannot promote the member", &a.target),
            MembersCmd::Remove(a) => ("cannot remove the member", &a.target),
        };
        match members_inner(&args.cmd, target).await {
            Ok(members) => {
                print_lines(&members_lines(&members, target.json));
                0
            }
            Err(f) => report(&f, what),
        }
    })
}

async fn members_inner(cmd: &MembersCmd, target: &Target) -> Result<Vec<v1::Member>, Failure> {
    let admin = connect(target)?;
    // Check what can be checked before anything is contacted.
    let change = match cmd {
        MembersCmd::List(_) => return admin.members().await,
        MembersCmd::Add(a) => {
            MemberChange::Add(parse_member_spec(&a.spec, !a.learner).map_err(Failure::Usage)?)
        }
        MembersCmd::Promote(a) => MemberChange::Promote(a.id),
        MembersCmd::Remove(a) => MemberChange::Remove(a.id),
    };
    admin.change_members(&change).await
}

fn members_lines(members: &[v1::Member], json: bool) -> Vec<String> {
    if json {
        let list: Vec<Value> = members
            .iter()
            .map(|m| {
                json!({
                    "id": m.id,
                    "voter": m.voter,
                    "peer_addr": m.peer_addr,
                    "client_addr": m.client_addr,
                    "http_addr": m.http_addr,
                })
            })
            .collect();
        return vec![json!({ "members": list }).to_string()];
    }
    let rows: Vec<Vec<String>> = members
        .iter()
        .map(|m| {
            vec![
                m.id.to_string(),
                if m.voter { "voter" } else { "learner" }.to_string(),
                or_dash(&m.peer_addr),
                or_dash(&m.client_addr),
                or_dash(&m.http_addr),
            ]
        })
        .collect();
    table(&["ID", "KIND", "PEER", "CLIENT", "HTTP"], &rows)
}

// ------------------------------------------------------------------------------------------
// tenure transfer-leadership

/// `tenure transfer-leadership`.
pub fn transfer(args: TransferArgs) -> ExitCode {
    block_on(async move {
        match transfer_inner(&args).await {
            Ok(line) => {
                print_lines(&[line]);
                0
            }
            Err(f) => report(&f, "cannot transfer leadership"),
        }
    })
}

async fn transfer_inner(args: &TransferArgs) -> Result<String, Failure> {
    if args.to == Some(0) {
        return Err(Failure::Usage("--to: node ids start at 1".into()));
    }
    let t = connect(&args.target)?
        .transfer_leadership(args.to, args.timeout)
        .await?;
    Ok(transfer_line(args.target.json, t.from, t.leader, t.term))
}

fn transfer_line(json: bool, from: u64, to: u64, term: u64) -> String {
    if json {
        json!({ "from": from, "leader": to, "term": term }).to_string()
    } else {
        format!("leader={to} term={term} from={from}")
    }
}

// ------------------------------------------------------------------------------------------
// tenure elections, tenure sessions

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

// ------------------------------------------------------------------------------------------
// tenure get, tenure put

/// `tenure get`.
pub fn get(args: GetArgs) -> ExitCode {
    block_on(async move {
        match get_inner(&args).await {
            Ok(line) => {
                print_lines(&[line]);
                0
            }
            Err(f) => report(
                &f,
                &format!(
                    "cannot read key \"{}\"",
                    lines::escape_value(args.fenced_key.as_bytes())
                ),
            ),
        }
    })
}

async fn get_inner(args: &GetArgs) -> Result<String, Failure> {
    if args.fenced_key.is_empty() {
        return Err(Failure::Usage("the key is empty".into()));
    }
    let client = connect(&args.target)?.client();
    let stored = client.get(&args.fenced_key).await?;
    Ok(match (stored, args.target.json) {
        (None, false) => "none".into(),
        (None, true) => json!({ "key": args.fenced_key, "stored": null }).to_string(),
        (Some(v), false) => format!(
            "token={} election={} index={} value={}",
            v.token,
            lines::escape_value(v.election.as_bytes()),
            v.index,
            lines::escape_value(&v.value)
        ),
        (Some(v), true) => {
            use base64::Engine as _;
            let mut stored = json!({ "election": v.election, "token": v.token, "index": v.index });
            stored["value"] = std::str::from_utf8(&v.value).map_or(Value::Null, Value::from);
            stored["value_base64"] = base64::engine::general_purpose::STANDARD
                .encode(&v.value)
                .into();
            json!({ "key": args.fenced_key, "stored": stored }).to_string()
        }
    })
}

/// `tenure put`.
pub fn put(args: PutArgs) -> ExitCode {
    block_on(async move {
        match put_inner(&args).await {
            Ok(line) => {
                print_lines(&[line]);
                0
            }
            Err(f) => report(
                &f,
                &format!(
                    "put of key \"{}\" refused",
                    lines::escape_value(args.fenced_key.as_bytes())
                ),
            ),
        }
    })
}

/// The token of a `tenure put`: `--token`, else `$TENURE_FENCING_TOKEN`.
fn put_token(flag: Option<u64>, env: Option<OsString>) -> Result<u64, String> {
    if let Some(t) = flag {
        return Ok(t);
    }
    match env {
        None => Err(
            "no --token, and TENURE_FENCING_TOKEN is not set (run under `tenure run`, \
                     or pass the token of the election's leader)"
                .into(),
        ),
        Some(v) => v
            .to_str()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("TENURE_FENCING_TOKEN={v:?} is not a token (a number)")),
    }
}

async fn put_inner(args: &PutArgs) -> Result<String, Failure> {
    use std::os::unix::ffi::OsStrExt as _;
    if args.fenced_key.is_empty() {
        return Err(Failure::Usage("the key is empty".into()));
    }
    if args.election.is_empty() {
        return Err(Failure::Usage("--election is empty".into()));
    }
    let token =
        put_token(args.token, std::env::var_os("TENURE_FENCING_TOKEN")).map_err(Failure::Usage)?;
    let client = connect(&args.target)?.client();
    let index = client
        .fenced_put(
            &args.fenced_key,
            args.value.as_bytes(),
            &args.election,
            token,
        )
        .await?;
    Ok(if args.target.json {
        json!({ "key": args.fenced_key, "election": args.election, "token": token, "index": index })
            .to_string()
    } else {
        format!("index={index}")
    })
}

pub fn delete(args: DeleteArgs) -> ExitCode {
    block_on(async move {
        match delete_inner(&args).await {
            Ok(line) => {
                print_lines(&[line]);
                0
            }
            Err(f) => report(
                &f,
                &format!(
                    "delete of key \"{}\" refused",
                    lines::escape_value(args.fenced_key.as_bytes())
                ),
            ),
        }
    })
}

async fn delete_inner(args: &DeleteArgs) -> Result<String, Failure> {
    if args.fenced_key.is_empty() {
        return Err(Failure::Usage("the key is empty".into()));
    }
    if args.election.is_empty() {
        return Err(Failure::Usage("--election is empty".into()));
    }
    let token =
        put_token(args.token, std::env::var_os("TENURE_FENCING_TOKEN")).map_err(Failure::Usage)?;
    let client = connect(&args.target)?.client();
    let existed = client
        .fenced_delete(&args.fenced_key, &args.election, token)
        .await?;
    Ok(if args.target.json {
        json!({ "key": args.fenced_key, "election": args.election, "token": token, "existed": existed })
            .to_string()
    } else {
        format!("existed={existed}")
    })
}

pub fn delete_election(args: DeleteElectionArgs) -> ExitCode {
    block_on(async move {
        match delete_election_inner(&args).await {
            Ok(line) => {
                print_lines(&[line]);
                0
            }
            Err(f) => report(
                &f,
                &format!(
                    "delete of election \"{}\" refused",
                    lines::escape_value(args.election.as_bytes())
                ),
            ),
        }
    })
}

async fn delete_election_inner(args: &DeleteElectionArgs) -> Result<String, Failure> {
    if args.election.is_empty() {
        return Err(Failure::Usage("the election name is empty".into()));
    }
    let client = connect(&args.target)?.client();
    let existed = client.delete_election(&args.election).await?;
    Ok(if args.target.json {
        json!({ "election": args.election, "existed": existed }).to_string()
    } else {
        format!("existed={existed}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::Error;
    use tenure_proto::Reason;
    use tonic::Status;

    #[test]
    fn the_token_comes_from_the_flag_or_the_environment() {
        assert_eq!(put_token(Some(7), Some("9".into())), Ok(7));
        assert_eq!(put_token(None, Some("9".into())), Ok(9));
        assert!(put_token(None, None)
            .expect_err("none")
            .contains("TENURE_FENCING_TOKEN"));
        assert!(put_token(None, Some("nine".into()))
            .expect_err("not a number")
            .contains("not a token"));
    }

    #[test]
    fn every_command_s_arguments_are_consistent() {
        use clap::Args as _;
        for cmd in [
            StatusArgs::augment_args(clap::Command::new("status")),
            MembersArgs::augment_args(clap::Command::new("members")),
            TransferArgs::augment_args(clap::Command::new("transfer-leadership")),
            ListArgs::augment_args(clap::Command::new("elections")),
            GetArgs::augment_args(clap::Command::new("get")),
            PutArgs::augment_args(clap::Command::new("put")),
        ] {
            cmd.debug_assert();
        }
    }

    #[test]
    fn refusals_exit_with_their_own_codes() {
        use tenure::exit::{EXIT_BACKEND, EXIT_DENIED, EXIT_FENCED, EXIT_USAGE};
        // As the cluster answers: a reason, and the current token on a fenced refusal.
        let refused = |reason: Reason| {
            let mut s = reason.label(Status::aborted("refused"));
            s.metadata_mut().insert(
                tenure_proto::CURRENT_TOKEN_KEY,
                tonic::metadata::MetadataValue::from_static("2"),
            );
            report(&Failure::from(Error::from(s)), "test")
        };
        assert_eq!(refused(Reason::StaleToken), EXIT_FENCED);
        assert_eq!(refused(Reason::TokenSuperseded), EXIT_FENCED);
        assert_eq!(refused(Reason::TokenNotIssued), EXIT_FENCED);
        assert_eq!(refused(Reason::WrongElection), EXIT_FENCED);
        assert_eq!(refused(Reason::PermissionDenied), EXIT_DENIED);
        assert_eq!(refused(Reason::Unauthenticated), EXIT_DENIED);
        assert_eq!(refused(Reason::InvalidArgument), EXIT_USAGE);
        assert_eq!(refused(Reason::UnknownSession), EXIT_BACKEND);
        assert_eq!(refused(Reason::Indeterminate), EXIT_BACKEND);
        assert_eq!(refused(Reason::SessionEnded), EXIT_BACKEND);
        assert_eq!(
            report(&Failure::Indeterminate("x".into()), "test"),
            EXIT_BACKEND
        );
        assert_eq!(report(&Failure::Usage("x".into()), "test"), EXIT_USAGE);
    }
}
