//! `tenure backup`, `tenure backup verify`, `tenure restore` and `tenure recover`: the
//! commands of docs/OPERATIONS.md's disaster recovery. What they do is
//! [`tenure::admin::Admin::backup`] (the stream from the leader) and
//! [`tenure_server::restore`] (the file, the new generation's data directories).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use tenure::admin::Failure;
use tenure_server::restore::{self, BackupHeader, RestoreError, RestorePlan};

use super::{connect, one_line, Target};
use crate::common::{log, print_lines};

/// `tenure backup`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BackupArgs {
    #[command(subcommand)]
    action: Option<BackupAction>,
    /// Where to write the backup (through FILE.partial, renamed once complete and checked).
    #[arg(long, value_name = "FILE", required = true)]
    out: Option<PathBuf>,
    #[command(flatten)]
    target: Target,
}

/// `tenure backup`'s subcommands.
#[derive(Debug, Subcommand)]
enum BackupAction {
    /// Check a backup file (its checksum, and that its state decodes) and summarize it.
    Verify {
        /// The backup file.
        file: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// `tenure restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup file.
    file: PathBuf,
    /// The new member's data directory (empty or absent).
    #[arg(long)]
    data_dir: PathBuf,
    /// The new member's id.
    #[arg(long)]
    id: u64,
    /// Every member of the new cluster, as `tenure server` takes them (`ID=PEER,CLIENT,HTTP`,
    /// or only `ID`): their ids are the new cluster's voters.
    #[arg(long = "node", required = true)]
    nodes: Vec<String>,
    /// The new generation (default: the backup's plus one). Restoring one backup a second
    /// time needs a generation above every one restored from it before.
    #[arg(long)]
    generation: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `tenure recover`.
#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The stopped survivor's data directory: it becomes the only voter of the next
    /// generation (its old data is moved to DIR.before-recover-gN).
    #[arg(long)]
    data_dir: PathBuf,
    /// Another survivor's data directory (stopped): recovery is refused if its log is
    /// longer. Give every survivor you can reach.
    #[arg(long = "survivor")]
    survivors: Vec<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `tenure backup` (and `tenure backup verify`).
pub fn backup(args: BackupArgs) -> ExitCode {
    if let Some(BackupAction::Verify { file, json }) = args.action {
        return local(json, || {
            let s = restore::verify(&file)?;
            let h = &s.header;
            Ok((
                json!(s),
                format!(
                    "ok: {} index={} term={} cluster={} generation={} sessions={} elections={} \
                     keys={} max_token={} bytes={} sha256={}",
                    file.display(),
                    h.index,
                    h.term,
                    h.cluster_id,
                    h.generation,
                    s.sessions,
                    s.elections,
                    s.keys,
                    s.max_token,
                    h.bytes,
                    h.sha256
                ),
            ))
        });
    }
    let out = args.out.expect("clap requires --out without a subcommand");
    one_line("cannot take a backup".into(), async move {
        let started = std::time::Instant::now();
        let (h, state) = connect(&args.target)?.backup().await?;
        let header = BackupHeader::from(h);
        restore::write_backup(&out, &header, &state)
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let secs = started.elapsed().as_secs_f64();
        Ok(if args.target.json {
            json!({ "file": out, "header": header, "seconds": secs }).to_string()
        } else {
            format!(
                "wrote {} index={} term={} generation={} bytes={} sha256={} in {secs:.2} s",
                out.display(),
                header.index,
                header.term,
                header.generation,
                header.bytes,
                header.sha256
            )
        })
    })
}

/// `tenure restore`.
pub fn restore(args: RestoreArgs) -> ExitCode {
    local(args.json, || {
        let voters = args
            .nodes
            .iter()
            .map(|spec| {
                let id = spec.split_once('=').map_or(spec.as_str(), |(id, _)| id);
                id.parse::<u64>().map_err(|_| {
                    RestoreError::Invalid(format!(
                        "--node {spec:?}: expected ID[=PEER,CLIENT,HTTP]"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let plan = RestorePlan {
            backup: args.file.clone(),
            data_dir: args.data_dir.clone(),
            id: args.id,
            voters,
            generation: args.generation,
        };
        let r = restore::restore(&plan)?;
        Ok((
            json!(r),
            format!(
                "restored node {} into {}: generation={} index={} term={}; every token from \
                 now on is above {} (the backup's highest was {}); start it with `tenure \
                 server` and the same --node list",
                args.id,
                args.data_dir.display(),
                r.generation,
                r.index,
                r.term,
                r.token_floor,
                r.old_max_token
            ),
        ))
    })
}

/// `tenure recover`.
pub fn recover(args: RecoverArgs) -> ExitCode {
    local(args.json, || {
        let r = restore::recover(&args.data_dir, &args.survivors)?;
        let x = &r.restored;
        Ok((
            json!(r),
            format!(
                "recovered {} as the only voter of generation {}: state at index {} (term {}; \
                 this member had recorded commit {}: the entries after it that it held are \
                 committed now; entries that only the lost members held are gone); every \
                 token from now on is above {}; old data in {}. Start it with `tenure \
                 server` (its own --node only), then add members back with `tenure members \
                 add`",
                args.data_dir.display(),
                x.generation,
                x.index,
                x.term,
                r.recorded_commit,
                x.token_floor,
                r.old_data.display()
            ),
        ))
    })
}

/// Runs a command that works on local files: its line (or JSON), or the error on stderr
/// with exit code 1.
fn local(
    json: bool,
    run: impl FnOnce() -> Result<(serde_json::Value, String), RestoreError>,
) -> ExitCode {
    match run() {
        Ok((j, text)) => {
            print_lines(&[if json { j.to_string() } else { text }]);
            ExitCode::SUCCESS
        }
        Err(e) => {
            log(&format!("error: {e}"));
            ExitCode::from(1)
        }
    }
}
