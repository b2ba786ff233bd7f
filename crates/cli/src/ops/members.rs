//! `tenure members list|add|promote|remove` and `tenure transfer-leadership`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use tenure::admin::{parse_member_spec, Failure, MemberChange};
use tenure_proto::v1;

use super::{connect, one_line, or_dash, report, Target};
use crate::common::{block_on, parse_duration, print_lines, table};
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
    let what = "cannot transfer leadership".to_string();
    one_line(what, async move { transfer_inner(&args).await })
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
