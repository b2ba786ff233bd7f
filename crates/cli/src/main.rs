//! `tenure`: the command-line tool.
//!
//! Each subcommand lives in its own module with its own argument struct; adding one is a new
//! variant of [`Cmd`] and a new arm in `main`.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand, ValueEnum};

mod certs;
mod common;
mod cron;
mod demo;
mod elect;
mod ops;
mod run;
mod server;

/// tenure — leader election with leases and fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the deterministic simulator over a range of seeds and check every invariant.
    Sim(tenure_sim::cli::SimArgs),
    /// Run one node of a tenure cluster.
    Server(Box<tenure_server::flags::ServerArgs>),
    /// Create a CA and certificates for a cluster's nodes and clients.
    Certs(certs::CertsArgs),
    /// Make a bearer token for a principal of the server's auth file.
    Token(certs::TokenArgs),
    /// Run a local 3-node cluster and three job replicas through a frozen leader and a crash.
    ///
    /// Prints a timeline (who leads, terms, fencing tokens, rejected stale writes) and a
    /// verdict (reports written, duplicates, failover times); exits 0 only if it holds.
    Demo(demo::DemoArgs),
    /// Benchmark tenure, etcd and ZooKeeper side by side (3-node clusters started here).
    Bench(tenure_bench::BenchArgs),
    /// Drive a local cluster of real servers through seeded faults and check the history.
    Nemesis(tenure_nemesis::cli::NemesisArgs),
    /// Check timing against the rules; estimate failover, renewal traffic, false-failover risk.
    ///
    /// Inputs from flags, a TOML file (--config) or a running node (--from URL of its HTTP
    /// port); flags override the file, which overrides measurements. Exit codes: 0 every
    /// rule holds; 1 a rule is violated; 2 bad arguments; 69 --from failed.
    Plan(Box<tenure_plan::cli::PlanArgs>),
    /// Run a command only while leading an election; stop it before the lease could pass.
    ///
    /// The command gets TENURE_FENCING_TOKEN, TENURE_ELECTION and TENURE_SESSION_ID
    /// (TENURE_LEADER_ID: the same session id under its deprecated name).
    ///
    /// Exit codes: the command's own when it exits while leading; 75 when leadership was
    /// lost and the command stopped; 76 with --once when another holder leads; 69 backend
    /// failure; 126/127 command not executable/not found (checked before campaigning);
    /// 128+N on signal N; 2 bad arguments.
    Run(run::RunArgs),
    /// Run a command on a schedule, exactly once per slot, on the replica that leads.
    ///
    /// Every replica runs the same line; the one that leads the election claims each slot in
    /// a ledger (a fenced key) with its token, runs the command, and records the outcome.
    /// The command gets TENURE_SLOT, TENURE_RUN_ID (its idempotency key), TENURE_ATTEMPT,
    /// TENURE_FENCING_TOKEN and TENURE_ELECTION. `tenure cron history ELECTION` shows the
    /// ledger; `tenure cron next --schedule …` the next slots. docs/CRON.md.
    ///
    /// Exit codes: it runs until a signal (128+N; the command is stopped, leadership
    /// resigned); 69 backend failure (refused credentials included, as `run`); 126/127
    /// command not executable/not found (checked before campaigning); 2 bad arguments.
    Cron(Box<cron::CronArgs>),
    /// Wait to lead an election, print the fencing token, hold until interrupted, resign.
    ///
    /// Exit codes: 0 after resigning on SIGINT/SIGTERM/SIGHUP; 75 leadership lost; 69
    /// backend failure; 2 bad arguments.
    Campaign(elect::CampaignArgs),
    /// Make the `tenure campaign --pid-file` process that holds an election resign.
    Resign(elect::ResignArgs),
    /// Print an election's leader, then every change (`token=… session=… value=…` or `none`).
    ///
    /// The value is escaped (`\n`, `\\`, `\xNN`, …): one leader is always one line. With
    /// --json, one JSON object per line. Exit codes: 0 on SIGINT/SIGTERM; 69 backend
    /// failure; 2 bad arguments.
    Observe(elect::ObserveArgs),
    /// Print an election's current leader (`token=… session=… value=…`) or `none`.
    ///
    /// The value is escaped (`\n`, `\\`, `\xNN`, …): one leader is always one line. With
    /// --json, one JSON object. Exit codes: 0; 69 backend failure; 2 bad arguments.
    Leader(elect::LeaderArgs),
    /// One row per member: role, term, leader, commit/applied index, lag, last contact,
    /// health, version; warnings for an even voter count, unreachable or lagging members.
    ///
    /// Exit codes: 0 all well; 1 printed a warning; 69 no member answered; 2 bad arguments;
    /// 77 not allowed.
    Status(ops::StatusArgs),
    /// List the cluster's members, or add, promote or remove one (no restart needed).
    Members(ops::MembersArgs),
    /// Hand Raft leadership to another voter (`--to ID`, or the most caught-up one).
    TransferLeadership(ops::TransferArgs),
    /// List elections: token, leader session, queued candidates, since which log index.
    Elections(ops::ListArgs),
    /// List sessions: id, TTL, time until the answering node would expire it (a little above the TTL: received time + TTL + margins), elections.
    Sessions(ops::ListArgs),
    /// Read a fenced key: `token=… election=… index=… value=…`, or `none`.
    Get(ops::GetArgs),
    /// Write a fenced key with an election's token (default `$TENURE_FENCING_TOKEN`).
    ///
    /// Exit codes: 0 written; 78 refused by its token (stale, superseded, never issued, or
    /// the key belongs to another election): nothing was written; 69 unreachable or outcome
    /// unknown; 2 bad arguments; 77 not allowed.
    Put(ops::PutArgs),
    /// Delete a fenced key with its election's current token (default
    /// `$TENURE_FENCING_TOKEN`): fenced exactly like `put`.
    ///
    /// Exit codes: 0 deleted (or already absent: `existed=false`); 78 refused by its token;
    /// 69 unreachable or outcome unknown; 2 bad arguments; 77 not allowed.
    Delete(ops::DeleteArgs),
    /// Delete an election that has no candidates. Its tokens never come back: an election
    /// created later under the same name starts above them.
    ///
    /// Exit codes: 0 deleted (or already absent: `existed=false`); 1 it still has
    /// candidates; 69 unreachable; 2 bad arguments; 77 not allowed.
    DeleteElection(ops::DeleteElectionArgs),
    /// Copy the replicated state from the leader into a file while the cluster serves
    /// (admin); `tenure backup verify FILE` checks one.
    ///
    /// Exit codes: 0 written and checked; 69 unreachable or the stream broke; 77 not
    /// allowed; 1 the file is damaged (verify); 2 bad arguments.
    Backup(ops::BackupArgs),
    /// Lay out one member of a new cluster from a backup, in a new generation whose tokens
    /// are above every token the old cluster could have issued (docs/OPERATIONS.md).
    ///
    /// Exit codes: 0 laid out; 1 the backup or the directory cannot be used; 2 bad
    /// arguments.
    Restore(ops::RestoreArgs),
    /// Make a stopped survivor of a lost majority the only voter of a new generation, from
    /// every entry of its log (docs/OPERATIONS.md).
    ///
    /// Exit codes: 0 recovered; 1 refused (another survivor holds a longer log, or the
    /// directory cannot be used); 2 bad arguments.
    Recover(ops::RecoverArgs),
    /// Print a shell completion script: `tenure completion bash > /etc/bash_completion.d/tenure`,
    /// `tenure completion zsh > "${fpath[1]}/_tenure"`, `tenure completion fish >
    /// ~/.config/fish/completions/tenure.fish`.
    Completion {
        /// The shell.
        shell: CompletionShell,
    },
    /// Serve the ballot page: a hand-stepped cluster of real nodes, votes, split votes,
    /// partitions and the fence, with the bully algorithm beside it (docs/BALLOT.md).
    Ballot(tenure_ballot::cli::BallotArgs),
    /// The guard of a `tenure run` command's process group (started by `tenure run`).
    #[command(hide = true)]
    RunGuard(run::GuardArgs),
    /// One replica of `tenure demo`'s job (started by `tenure demo`).
    #[command(hide = true)]
    DemoWorker(tenure_demo::worker::WorkerArgs),
}

/// The shells `tenure completion` writes scripts for.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// Writes the completion script for `shell` to stdout (hidden subcommands left out).
fn completion(shell: CompletionShell) -> ExitCode {
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    // The generators list hidden subcommands too; the internal ones are left out here.
    let full = Cli::command();
    let mut visible = clap::Command::new("tenure")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .subcommand_required(true)
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut visible, "tenure", &mut script);
    use std::io::Write as _;
    match std::io::stdout().write_all(&script) {
        // A reader that stopped early (`| head`) is not an error of ours.
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure completion: cannot write the script: {e}");
            ExitCode::FAILURE
        }
    }
}

/// mimalloc instead of the system allocator: the simulator and the server allocate many
/// small, short-lived objects (messages, entries, map nodes), where it is measurably faster.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sim(args) => tenure_sim::cli::run(args),
        Cmd::Server(args) => server::run(*args),
        Cmd::Certs(args) => certs::run(args),
        Cmd::Token(args) => certs::token(args),
        Cmd::Demo(args) => demo::run(args),
        Cmd::Plan(args) => tenure_plan::cli::run(*args),
        Cmd::Nemesis(args) => tenure_nemesis::cli::run(args),
        Cmd::Bench(args) => match std::env::current_exe() {
            Ok(bin) => tenure_bench::run(args, bin),
            Err(e) => {
                eprintln!("tenure bench: cannot find this binary: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::DemoWorker(args) => tenure_demo::worker::run(args),
        Cmd::Run(args) => run::run(args),
        Cmd::Cron(args) => cron::run(*args),
        Cmd::RunGuard(args) => run::guard(args),
        Cmd::Campaign(args) => elect::campaign(args),
        Cmd::Resign(args) => elect::resign(args),
        Cmd::Observe(args) => elect::observe(args),
        Cmd::Leader(args) => elect::leader(args),
        Cmd::Completion { shell } => completion(shell),
        Cmd::Ballot(args) => tenure_ballot::cli::run(args, server::shutdown_signal()),
        Cmd::Status(args) => ops::status(args),
        Cmd::Members(args) => ops::members(args),
        Cmd::TransferLeadership(args) => ops::transfer(args),
        Cmd::Backup(args) => ops::backup(args),
        Cmd::Restore(args) => ops::restore(args),
        Cmd::Recover(args) => ops::recover(args),
        Cmd::Elections(args) => ops::elections(args),
        Cmd::Sessions(args) => ops::sessions(args),
        Cmd::Get(args) => ops::get(args),
        Cmd::Put(args) => ops::put(args),
        Cmd::Delete(args) => ops::delete(args),
        Cmd::DeleteElection(args) => ops::delete_election(args),
    }
}
