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
//! Output follows [`tenure::lines`]: text for people, `--json` for scripts (one JSON
//! object per line, nothing else on stdout); names and values are escaped in text. Logs and
//! errors go to stderr. Exit codes: [`crate::common::exit_code`] (docs/CLI.md has the
//! table), and 1 when `status` printed a warning.

mod backup;
mod keys;
mod lists;
mod members;
mod status;

use std::process::ExitCode;

use clap::Args;
use tenure::admin::{Admin, Failure};

use crate::common::{backend_url, block_on, exit_code, log, print_lines, Commands, TlsFlags};

pub use backup::{backup, recover, restore, BackupArgs, RecoverArgs, RestoreArgs};
pub use keys::{
    delete, delete_election, get, put, DeleteArgs, DeleteElectionArgs, GetArgs, PutArgs,
};
pub use lists::{elections, sessions, ListArgs};
pub use members::{members, transfer, MembersArgs, TransferArgs};
pub use status::{status, StatusArgs};

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

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// Runs a command that prints one line: the line, or the failure reported as `what` failed.
fn one_line(
    what: String,
    command: impl std::future::Future<Output = Result<String, Failure>>,
) -> ExitCode {
    block_on(async move {
        match command.await {
            Ok(line) => {
                print_lines(&[line]);
                0
            }
            Err(f) => report(&f, &what),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::Error;
    use tenure_proto::Reason;
    use tonic::Status;

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
