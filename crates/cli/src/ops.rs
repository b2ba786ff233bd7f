//! The operator commands: `tenure status`, `tenure members list|add|promote|remove`,
//! `tenure transfer-leadership`, `tenure elections`, `tenure sessions`, `tenure get` and
//! `tenure put`.
//!
//! They speak the `tenure.v1` gRPC API directly (the `Cluster` and `FencedKeys` services),
//! because they need what the election client library does not offer: one answer from
//! *every* member (`status`), the cluster's own administration calls, and pages of the
//! applied state. They take the same `--backend tenure://…` URL as the script commands,
//! with the same TLS files and bearer token (`?ca=&cert=&key=&token_file=`, or
//! `--ca/--cert/--key/--token-file`, or `$TENURE_CA`, …). The URL may name one node: the
//! others are learned from its member list, and requests that only the Raft leader serves
//! follow `not-leader` answers to it.
//!
//! Output follows [`crate::output`]: text for people, `--json` for scripts (one JSON
//! object per line, nothing else on stdout); names and values are escaped in text. Logs and
//! errors go to stderr. Exit codes (docs/CLI.md has the table): 0 done; 1 `status` printed a
//! warning; 2 a bad argument (or one the cluster refused as invalid); 69 the cluster could
//! not be reached or failed, or the outcome is unknown; 77 the client's credentials may not
//! do this; 78 a fenced write was refused (stale or superseded token, a token the election
//! never issued, or a key that belongs to another election).

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use tenure::channel::{LeaderChannel, NodeChannel};
use tenure::Error;
use tenure_proto::v1;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::{Reason, LEADER_ADDR_KEY};
use tonic::Status;

use crate::common::{
    backend_url, block_on, exit_code, human_ms, log, parse_duration, print_lines, table, Commands,
    TlsFlags,
};
use crate::output;

/// Exit code: `tenure status` printed at least one warning.
pub const EXIT_WARNING: u8 = 1;

/// Longest wait for one call at one node.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a membership change may take to be in effect after the leader accepted it.
const LEADER_BUDGET: Duration = Duration::from_secs(8);
/// Pause between looks at a membership or leadership that is still changing.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

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

/// Why a command failed, and so how it exits.
#[derive(Debug)]
enum Failure {
    /// A bad argument: exit 2.
    Usage(String),
    /// No node answered, or the cluster failed: exit 69.
    Unreachable(String),
    /// The request may or may not have taken effect: exit 69.
    Indeterminate(String),
    /// The cluster refused the request with a definite answer.
    Refused(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::Indeterminate(m) | Error::SessionEnded(m) => Failure::Indeterminate(m),
            Error::NotLeader { .. } | Error::Unavailable(_) => Failure::Unreachable(e.to_string()),
            Error::InvalidUrl { .. } => Failure::Usage(e.to_string()),
            e => Failure::Refused(e),
        }
    }
}

impl Failure {
    /// The client library's error this failure stands for: what decides the exit code.
    fn error(&self) -> Error {
        match self {
            Failure::Usage(m) => Error::InvalidArgument(m.clone()),
            Failure::Unreachable(m) => Error::Unavailable(m.clone()),
            Failure::Indeterminate(m) => Error::Indeterminate(m.clone()),
            Failure::Refused(e) => e.clone(),
        }
    }

    /// Logs what failed and returns the exit code.
    fn report(&self, what: &str) -> u8 {
        match self {
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
        exit_code(&self.error(), Commands::Operator)
    }
}

/// The cluster of one `tenure://` URL, through the client library's leader-following
/// channel (its URL parsing, TLS files and bearer token).
struct Conn {
    nodes: LeaderChannel,
}

impl Conn {
    /// Parses a `tenure://` URL (nothing is contacted yet).
    fn new(url: &str) -> Result<Conn, Failure> {
        let shown = tenure::redact_url(url);
        if !url.starts_with("tenure:") {
            return Err(Failure::Usage(format!(
                "backend {shown}: the operator commands need a tenure:// URL (a tenure cluster)"
            )));
        }
        let nodes = LeaderChannel::from_url(url).map_err(|e| Failure::Usage(e.to_string()))?;
        if nodes.is_restricted() {
            return Err(Failure::Usage(format!(
                "backend {shown}: discover=false: the operator commands talk to every member \
                 directly, so they cannot be kept to the URL's addresses"
            )));
        }
        Ok(Conn { nodes })
    }

    fn addrs(&self) -> Vec<String> {
        self.nodes.addrs()
    }

    /// A client of the `Cluster` service at the node `addr`.
    fn cluster_at(&self, addr: &str) -> Result<ClusterClient<NodeChannel>, String> {
        self.nodes
            .node(addr)
            .map(ClusterClient::new)
            .map_err(|e| e.to_string())
    }

    /// `call` at the first node (in `addrs` order) that answers it, with that node's address.
    /// A definite refusal (bad credentials, an invalid argument) is final.
    async fn any<T, F, Fut>(&self, addrs: &[String], call: F) -> Result<(String, T), Failure>
    where
        F: Fn(ClusterClient<NodeChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let mut errors = Vec::new();
        for addr in addrs {
            let client = match self.cluster_at(addr) {
                Ok(c) => c,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            match tokio::time::timeout(CALL_TIMEOUT, call(client)).await {
                Ok(Ok(t)) => return Ok((addr.clone(), t.into_inner())),
                Ok(Err(s)) if is_final(&s) => return Err(Failure::Refused(s.into())),
                Ok(Err(s)) => errors.push(format!("{addr}: {}", s.message())),
                Err(_) => errors.push(format!("{addr}: no answer within {CALL_TIMEOUT:?}")),
            }
        }
        Err(Failure::Unreachable(format!(
            "no node answered ({})",
            errors.join("; ")
        )))
    }

    /// `call` at the Raft leader, following `not-leader` answers. A call that reached a node
    /// and broke without an answer may have taken effect: that is indeterminate, not retried
    /// ([`LeaderChannel::call_once`]).
    async fn at_leader<T, F, Fut>(&self, call: F) -> Result<T, Failure>
    where
        F: Fn(ClusterClient<NodeChannel>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let answer = self
            .nodes
            .call_once(|ch| {
                let call = call(ClusterClient::new(ch));
                async move { call.await.map(tonic::Response::new) }
            })
            .await?;
        Ok(answer)
    }

    /// The status of the first node that answers, its members learned.
    async fn first_status(&self) -> Result<(String, v1::StatusResponse), Failure> {
        let (addr, s) = self
            .any(&self.addrs(), |mut c| async move {
                c.status(v1::StatusRequest {}).await
            })
            .await?;
        self.nodes.learn(&s.members);
        Ok((addr, s))
    }
}

/// Whether a refusal is the same at every node (so trying others is pointless).
fn is_final(s: &Status) -> bool {
    matches!(
        Reason::of(s),
        Some(Reason::Unauthenticated | Reason::PermissionDenied | Reason::InvalidArgument)
    ) || s.code() == tonic::Code::Unimplemented
}

fn connect(target: &Target) -> Result<Conn, Failure> {
    Conn::new(&backend_url(target.backend.as_deref(), &target.tls))
}

// ------------------------------------------------------------------------------------------
// tenure status

/// One member as `tenure status` shows it.
#[derive(Debug)]
struct MemberView {
    member: v1::Member,
    /// Its own answer, or why there is none.
    status: Result<v1::StatusResponse, String>,
    /// Entries behind the leader's log (the leader's view), when a leader answered.
    lag: Option<u64>,
    /// Milliseconds since the leader last heard from it (`None`: the leader itself, no
    /// leader answered, or not heard from in this term).
    last_contact_ms: Option<u64>,
    health: &'static str,
}

/// Every member's view, the leader's id and the warnings, from the statuses gathered.
fn assess(
    members: Vec<v1::Member>,
    statuses: Vec<Result<v1::StatusResponse, String>>,
    lag_max: u64,
    contact_max_ms: u64,
) -> (Vec<MemberView>, Option<u64>, Vec<String>) {
    // The leader: the reachable member that says it leads, in the highest term.
    let leader = statuses
        .iter()
        .filter_map(|s| s.as_ref().ok())
        .filter(|s| s.role == "leader")
        .max_by_key(|s| s.term)
        .cloned();
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

/// `tenure status`.
pub fn status(args: StatusArgs) -> ExitCode {
    block_on(async move {
        match status_inner(&args).await {
            Ok(code) => code,
            Err(f) => f.report("cannot read the cluster's status"),
        }
    })
}

async fn status_inner(args: &StatusArgs) -> Result<u8, Failure> {
    let conn = connect(&args.target)?;
    let (_, first) = conn.first_status().await?;
    let members = first.members.clone();
    // Every member at once, each at its own client address.
    let asks = members.iter().map(|m| {
        let conn = &conn;
        let addr = m.client_addr.clone();
        async move {
            if addr.is_empty() {
                return Err("no known client address".to_string());
            }
            let mut c = conn.cluster_at(&addr)?;
            match tokio::time::timeout(CALL_TIMEOUT, c.status(v1::StatusRequest {})).await {
                Ok(answer) => answer
                    .map(tonic::Response::into_inner)
                    .map_err(|s| s.message().to_string()),
                Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
            }
        }
    });
    let statuses = futures_join_all(asks).await;
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
                output::escape_value(u.principal.as_bytes()),
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

/// All the futures, run concurrently, their outputs in order.
async fn futures_join_all<T>(futures: impl Iterator<Item = impl Future<Output = T>>) -> Vec<T> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<T>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
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
            Err(f) => f.report(what),
        }
    })
}

/// Parses `ID=PEER,CLIENT,HTTP` or `ID` into an `AddMember` request.
fn parse_member_spec(spec: &str, voter: bool) -> Result<v1::MemberRequest, String> {
    let (id, addrs) = match spec.split_once('=') {
        Some((id, addrs)) => (id, Some(addrs)),
        None => (spec, None),
    };
    let id: u64 = match id.parse() {
        Ok(n) if n > 0 => n,
        _ => {
            return Err(format!(
                "{spec:?}: the node id must be a positive integer (ID=PEER,CLIENT,HTTP or ID)"
            ))
        }
    };
    let mut request = v1::MemberRequest {
        id,
        voter,
        ..Default::default()
    };
    if let Some(addrs) = addrs {
        let parts: Vec<&str> = addrs.split(',').collect();
        if parts.len() != 3 {
            return Err(format!(
                "{spec:?}: give PEER,CLIENT,HTTP (three host:port addresses) after {id}="
            ));
        }
        for (name, a) in ["PEER", "CLIENT", "HTTP"].iter().zip(&parts) {
            let port = a.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
            if !matches!(port, Some((h, Ok(p))) if !h.is_empty() && p > 0) {
                return Err(format!("{spec:?}: {name} {a:?} is not host:port"));
            }
        }
        request.peer_addr = parts[0].to_string();
        request.client_addr = parts[1].to_string();
        request.http_addr = parts[2].to_string();
    }
    Ok(request)
}

async fn members_inner(cmd: &MembersCmd, target: &Target) -> Result<Vec<v1::Member>, Failure> {
    let conn = connect(target)?;
    // Check what can be checked before anything is contacted.
    let add = match cmd {
        MembersCmd::Add(a) => Some(parse_member_spec(&a.spec, !a.learner).map_err(Failure::Usage)?),
        _ => None,
    };
    let (_, first) = conn.first_status().await?;
    let response = match cmd {
        MembersCmd::List(_) => return Ok(first.members),
        MembersCmd::Add(_) => {
            let req = add.expect("parsed above");
            conn.at_leader(|mut c| {
                let req = req.clone();
                async move { c.add_member(req).await }
            })
            .await?
        }
        MembersCmd::Promote(a) => {
            let id = a.id;
            conn.at_leader(|mut c| async move {
                c.promote_member(v1::PromoteMemberRequest { id }).await
            })
            .await?
        }
        MembersCmd::Remove(a) => {
            let id = a.id;
            conn.at_leader(|mut c| async move {
                c.remove_member(v1::MemberRequest {
                    id,
                    ..Default::default()
                })
                .await
            })
            .await?
        }
    };
    let want = |members: &[v1::Member]| match cmd {
        MembersCmd::List(_) => true,
        MembersCmd::Add(a) => members
            .iter()
            .any(|m| add_id(&a.spec).is_some_and(|id| m.id == id) && m.voter != a.learner),
        MembersCmd::Promote(a) => members.iter().any(|m| m.id == a.id && m.voter),
        MembersCmd::Remove(a) => members.iter().all(|m| m.id != a.id),
    };
    let members = response.into_inner().members;
    if want(&members) {
        return Ok(members);
    }
    // The leader answers once the change is in its log; joint consensus then takes another
    // round. Wait for the membership that results, as the leader reports it.
    let deadline = Instant::now() + LEADER_BUDGET;
    loop {
        let status = conn
            .at_leader(|mut c| async move {
                leader_only(c.status(v1::StatusRequest {}).await?.into_inner())
            })
            .await?;
        if want(&status.members) {
            return Ok(status.members);
        }
        if Instant::now() >= deadline {
            return Err(Failure::Indeterminate(format!(
                "the leader accepted the change, but the membership did not reach it within \
                 {LEADER_BUDGET:?}"
            )));
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// The node id of a `members add` spec.
fn add_id(spec: &str) -> Option<u64> {
    spec.split('=').next().and_then(|id| id.parse().ok())
}

/// `s` if it is the leader's status; a `not-leader` answer (with the leader's address)
/// otherwise, so that [`Conn::at_leader`] goes there.
fn leader_only(s: v1::StatusResponse) -> Result<v1::StatusResponse, Status> {
    if s.role == "leader" {
        return Ok(s);
    }
    let mut status = Reason::NotLeader.label(Status::failed_precondition("not the leader"));
    if let Ok(v) = s.leader_addr.parse() {
        status.metadata_mut().insert(LEADER_ADDR_KEY, v);
    }
    Err(status)
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
            Err(f) => f.report("cannot transfer leadership"),
        }
    })
}

async fn transfer_inner(args: &TransferArgs) -> Result<String, Failure> {
    if args.to == Some(0) {
        return Err(Failure::Usage("--to: node ids start at 1".into()));
    }
    let conn = connect(&args.target)?;
    conn.first_status().await?;
    let to = args.to.unwrap_or(0);
    // The node that answers the transfer is the leader that hands over.
    let from = conn
        .at_leader(|mut c| async move {
            let s = c.status(v1::StatusRequest {}).await?;
            // Not the leader (any more): go where it says leadership is.
            let s = leader_only(s.into_inner())?;
            c.transfer_leadership(v1::TransferLeadershipRequest { to })
                .await?;
            Ok((s.id, s.term))
        })
        .await?;
    let (from, from_term) = from;
    if to == from {
        return Ok(transfer_line(args.target.json, from, from, from_term));
    }
    // Wait for a leader in a later term, as any member reports it.
    let deadline = Instant::now() + args.timeout;
    loop {
        let addrs = conn.addrs();
        for addr in &addrs {
            let Ok(mut c) = conn.cluster_at(addr) else {
                continue;
            };
            let Ok(Ok(s)) =
                tokio::time::timeout(CALL_TIMEOUT, c.status(v1::StatusRequest {})).await
            else {
                continue;
            };
            let s = s.into_inner();
            if s.role == "leader" && s.term > from_term {
                if to != 0 && s.id != to {
                    return Err(Failure::Unreachable(format!(
                        "leadership went to node {} in term {}, not to node {to}",
                        s.id, s.term
                    )));
                }
                return Ok(transfer_line(args.target.json, from, s.id, s.term));
            }
        }
        if Instant::now() >= deadline {
            return Err(Failure::Indeterminate(format!(
                "node {from} accepted the transfer, but no new leader was seen within {:?}",
                args.timeout
            )));
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
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
            Err(f) => f.report("cannot list the elections"),
        }
    })
}

async fn elections_inner(args: &ListArgs) -> Result<(), Failure> {
    let conn = connect(&args.target)?;
    let mut after = args.after.clone().unwrap_or_default();
    // Every page from the same node, so that the walk sees one replica's state.
    let mut node: Option<String> = None;
    let mut header = !args.target.json;
    loop {
        let addrs = node.clone().map_or_else(|| conn.addrs(), |n| vec![n]);
        let req = v1::ListElectionsRequest {
            after: after.clone(),
            limit: args.limit,
        };
        let (addr, page) = conn
            .any(&addrs, |mut c| {
                let req = req.clone();
                async move { c.list_elections(req).await }
            })
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
                output::escape_value(after.as_bytes())
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
        output::escape_value(e.name.as_bytes())
    )
}

/// `tenure sessions`.
pub fn sessions(args: ListArgs) -> ExitCode {
    block_on(async move {
        match sessions_inner(&args).await {
            Ok(()) => 0,
            Err(f) => f.report("cannot list the sessions"),
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
    let conn = connect(&args.target)?;
    let mut node: Option<String> = None;
    let mut header = !args.target.json;
    loop {
        let addrs = node.clone().map_or_else(|| conn.addrs(), |n| vec![n]);
        let req = v1::ListSessionsRequest {
            after,
            limit: args.limit,
        };
        let (addr, page) = conn
            .any(&addrs, |mut c| async move { c.list_sessions(req).await })
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
                    .map(|e| output::escape_value(e.as_bytes()))
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
            Err(f) => f.report(&format!(
                "cannot read key \"{}\"",
                output::escape_value(args.fenced_key.as_bytes())
            )),
        }
    })
}

async fn get_inner(args: &GetArgs) -> Result<String, Failure> {
    if args.fenced_key.is_empty() {
        return Err(Failure::Usage("the key is empty".into()));
    }
    let client = tenure::Client::with_channel(connect(&args.target)?.nodes);
    let stored = client.get(&args.fenced_key).await?;
    Ok(match (stored, args.target.json) {
        (None, false) => "none".into(),
        (None, true) => json!({ "key": args.fenced_key, "stored": null }).to_string(),
        (Some(v), false) => format!(
            "token={} election={} index={} value={}",
            v.token,
            output::escape_value(v.election.as_bytes()),
            v.index,
            output::escape_value(&v.value)
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
            Err(f) => f.report(&format!(
                "put of key \"{}\" refused",
                output::escape_value(args.fenced_key.as_bytes())
            )),
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
    let client = tenure::Client::with_channel(connect(&args.target)?.nodes);
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
            Err(f) => f.report(&format!(
                "delete of key \"{}\" refused",
                output::escape_value(args.fenced_key.as_bytes())
            )),
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
    let client = tenure::Client::with_channel(connect(&args.target)?.nodes);
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
            Err(f) => f.report(&format!(
                "delete of election \"{}\" refused",
                output::escape_value(args.election.as_bytes())
            )),
        }
    })
}

async fn delete_election_inner(args: &DeleteElectionArgs) -> Result<String, Failure> {
    if args.election.is_empty() {
        return Err(Failure::Usage("the election name is empty".into()));
    }
    let client = tenure::Client::with_channel(connect(&args.target)?.nodes);
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
    fn member_specs_parse_or_say_why_not() {
        let r =
            parse_member_spec("4=10.0.0.4:7001,10.0.0.4:8001,10.0.0.4:9001", true).expect("valid");
        assert_eq!(
            (
                r.id,
                r.voter,
                r.peer_addr.as_str(),
                r.client_addr.as_str(),
                r.http_addr.as_str()
            ),
            (4, true, "10.0.0.4:7001", "10.0.0.4:8001", "10.0.0.4:9001")
        );
        let r = parse_member_spec("5=n5:7001,n5:8001,n5:9001", false).expect("a learner");
        assert_eq!((r.voter, r.http_addr.as_str()), (false, "n5:9001"));
        let r = parse_member_spec("3", true).expect("a static node");
        assert_eq!((r.id, r.peer_addr.as_str()), (3, ""));
        for (bad, why) in [
            ("0", "positive"),
            ("x=a:1,b:2", "positive"),
            ("4=a:1", "PEER,CLIENT"),
            ("4=a:1,b:2", "PEER,CLIENT,HTTP"),
            ("4=a:1,b:2,c:3,d:4", "PEER,CLIENT"),
            ("4=a:1,b", "CLIENT"),
            ("4=a:1,b:2,:3", "HTTP"),
            ("4=a:0,b:2,c:3", "PEER"),
        ] {
            let e = parse_member_spec(bad, true).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

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
        use crate::common::{EXIT_BACKEND, EXIT_DENIED, EXIT_FENCED, EXIT_USAGE};
        // As the cluster answers: a reason, and the current token on a fenced refusal.
        let refused = |reason: Reason| {
            let mut s = reason.label(Status::aborted("refused"));
            s.metadata_mut().insert(
                tenure_proto::CURRENT_TOKEN_KEY,
                tonic::metadata::MetadataValue::from_static("2"),
            );
            Failure::from(Error::from(s)).report("test")
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
        assert!(matches!(
            Failure::from(Error::SessionEnded("x".into())),
            Failure::Indeterminate(_)
        ));
        assert_eq!(
            Failure::Indeterminate("x".into()).report("test"),
            EXIT_BACKEND
        );
        assert_eq!(Failure::Usage("x".into()).report("test"), EXIT_USAGE);
    }

    // Channels are made lazily, but making one needs a runtime.
    #[tokio::test]
    async fn urls_are_checked_before_anything_is_contacted() {
        for (url, why) in [
            ("memory:", "tenure://"),
            ("tenure://", "no host:port"),
            ("tenure://host", "no port"),
            ("tenure://h:1?discover=false", "discover"),
            ("tenure://h:1?bogus=1", "unknown query parameter"),
            ("tenure://h:1?cert=a&key=b", "need ca"),
        ] {
            match Conn::new(url) {
                Err(Failure::Usage(m)) => assert!(m.contains(why), "{url}: {m}"),
                Err(other) => panic!("{url}: {other:?}"),
                Ok(_) => panic!("{url}: accepted"),
            }
        }
        assert!(Conn::new("tenure://a:1,b:2").is_ok());
    }
}
