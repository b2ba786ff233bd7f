//! Exit codes: the one map from an [`Error`] to a process's exit status, shared by every
//! `tenure` subcommand and by any program embedding this library that wants to exit as
//! `tenure` does. docs/CLI.md ("Exit codes") documents it as a table; a test here reads that
//! table and fails when the two disagree.

use crate::Error;

/// Exit code: `tenure status` printed a warning; `tenure delete-election`: the election
/// still has candidates; `tenure resign`: no holder runs.
pub const EXIT_IN_USE: u8 = 1;
/// Exit code: bad arguments.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the backend failed or cannot be reached, or the outcome is unknown.
pub const EXIT_BACKEND: u8 = 69;
/// Exit code: leadership was lost and the command stopped.
pub const EXIT_LOST: u8 = 75;
/// Exit code: `--once` and another holder leads; nothing was run.
pub const EXIT_SKIPPED: u8 = 76;
/// Exit code: the cluster refused the client's credentials for this request
/// (`unauthenticated`, `permission-denied`).
pub const EXIT_DENIED: u8 = 77;
/// Exit code: a fenced write was refused by its token (`stale-token`, `token-superseded`,
/// `token-not-issued`, `wrong-election`); nothing was written.
pub const EXIT_FENCED: u8 = 78;

/// Which exit-code contract a command follows (docs/CLI.md, "Exit codes", column
/// "commands"). Only refused credentials tell the two apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commands {
    /// `campaign`, `resign`, `observe`, `leader` and `run`: every failure of the backend,
    /// refused credentials included, exits [`EXIT_BACKEND`] (their contract predates
    /// [`EXIT_DENIED`], and scripts test for 69).
    Script,
    /// `status`, `members`, `transfer-leadership`, `elections`, `sessions`, `get`, `put`,
    /// `delete` and `delete-election`: refused credentials exit [`EXIT_DENIED`].
    Operator,
}

/// The exit code of an error of the backend or the client library: the one map of every
/// subcommand, documented as the table in docs/CLI.md ("Exit codes"; a test checks that
/// they agree). Every variant is named, so that a new one needs a decision here.
pub fn exit_code(e: &Error, commands: Commands) -> u8 {
    match e {
        // The arguments were at fault: a URL that cannot be understood or names an unknown
        // scheme, a file it names that cannot be read, an argument the backend refused.
        Error::InvalidUrl { .. } | Error::UnsupportedBackend { .. } | Error::InvalidArgument(_) => {
            EXIT_USAGE
        }
        // A fenced write refused by its token: nothing was written.
        Error::StaleToken { .. } | Error::TokenNotIssued(_) | Error::WrongElection(_) => {
            EXIT_FENCED
        }
        Error::AuthenticationFailed(_) | Error::PermissionDenied(_) => match commands {
            Commands::Script => EXIT_BACKEND,
            Commands::Operator => EXIT_DENIED,
        },
        Error::ElectionInUse(_) => EXIT_IN_USE,
        Error::NotLeader { .. }
        | Error::Unavailable(_)
        | Error::Indeterminate(_)
        | Error::SessionEnded(_)
        | Error::Tls(_)
        | Error::SessionLost
        | Error::UnknownElection(_)
        | Error::NotCandidate(_)
        | Error::QuotaExceeded(_)
        | Error::Backend(_) => EXIT_BACKEND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_proto::Reason;
    use Commands::{Operator, Script};

    /// One error of each variant, with the codes it exits with (script, operator commands).
    fn every_error() -> Vec<(Error, u8, u8)> {
        let s = |x: &str| x.to_string();
        vec![
            (Error::NotLeader { leader_hint: None }, 69, 69),
            (Error::Unavailable(s("x")), 69, 69),
            (Error::Indeterminate(s("x")), 69, 69),
            (Error::SessionEnded(s("x")), 69, 69),
            (Error::StaleToken { current: 2 }, 78, 78),
            (Error::WrongElection(s("x")), 78, 78),
            (Error::TokenNotIssued(s("x")), 78, 78),
            (Error::PermissionDenied(s("x")), 69, 77),
            (Error::AuthenticationFailed(s("x")), 69, 77),
            (Error::Tls(s("x")), 69, 69),
            (Error::SessionLost, 69, 69),
            (Error::UnknownElection(s("x")), 69, 69),
            (Error::NotCandidate(s("x")), 69, 69),
            (Error::InvalidArgument(s("x")), 2, 2),
            (Error::QuotaExceeded(s("x")), 69, 69),
            (Error::ElectionInUse(s("x")), 1, 1),
            (
                Error::UnsupportedBackend {
                    scheme: s("x"),
                    why: s("x"),
                },
                2,
                2,
            ),
            (
                Error::InvalidUrl {
                    url: s("x"),
                    why: s("x"),
                },
                2,
                2,
            ),
            (Error::Backend(s("x")), 69, 69),
        ]
    }

    /// The position of `e`'s variant in [`every_error`]: a new variant does not compile here
    /// until it is listed there too.
    fn variant(e: &Error) -> usize {
        match e {
            Error::NotLeader { .. } => 0,
            Error::Unavailable(_) => 1,
            Error::Indeterminate(_) => 2,
            Error::SessionEnded(_) => 3,
            Error::StaleToken { .. } => 4,
            Error::WrongElection(_) => 5,
            Error::TokenNotIssued(_) => 6,
            Error::PermissionDenied(_) => 7,
            Error::AuthenticationFailed(_) => 8,
            Error::Tls(_) => 9,
            Error::SessionLost => 10,
            Error::UnknownElection(_) => 11,
            Error::NotCandidate(_) => 12,
            Error::InvalidArgument(_) => 13,
            Error::QuotaExceeded(_) => 14,
            Error::ElectionInUse(_) => 15,
            Error::UnsupportedBackend { .. } => 16,
            Error::InvalidUrl { .. } => 17,
            Error::Backend(_) => 18,
        }
    }

    #[test]
    fn every_error_variant_has_its_exit_code() {
        let all = every_error();
        for (i, (e, script, operator)) in all.iter().enumerate() {
            assert_eq!(variant(e), i, "every variant once, in order: {e:?}");
            assert_eq!(exit_code(e, Script), *script, "{e:?} in a script command");
            assert_eq!(
                exit_code(e, Operator),
                *operator,
                "{e:?} in an operator command"
            );
        }
        assert_eq!(all.len(), 19);
    }

    /// The error a cluster's refusal with `reason` becomes in the client.
    fn refusal(reason: Reason) -> Error {
        let mut s = reason.label(tonic::Status::aborted("refused"));
        s.metadata_mut().insert(
            tenure_proto::CURRENT_TOKEN_KEY,
            tonic::metadata::MetadataValue::from_static("2"),
        );
        Error::from(s)
    }

    /// A row of docs/CLI.md's exit-code table: its code, the reasons its meaning names (in
    /// backquotes), and its commands column.
    struct Row {
        code: u8,
        reasons: Vec<Reason>,
        commands: String,
    }

    impl Row {
        /// Whether the row's commands column covers commands of kind `kind`: `all`, "the
        /// operator commands", or one of them named.
        fn covers(&self, kind: Commands) -> bool {
            let named: &[&str] = match kind {
                Script => &["`campaign`", "`resign`", "`observe`", "`leader`", "`run`"],
                Operator => &[
                    "operator",
                    "`status`",
                    "`members`",
                    "`transfer-leadership`",
                    "`elections`",
                    "`sessions`",
                    "`get`",
                    "`put`",
                    "`delete`",
                    "`delete-election`",
                ],
            };
            self.commands.split([',', ' ']).any(|w| w == "all")
                || named.iter().any(|n| self.commands.contains(n))
        }
    }

    /// The rows with a single number for a code (not `126 / 127`, `128+N`, `other`).
    fn doc_rows() -> Vec<Row> {
        let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/CLI.md"));
        let section = doc
            .split("\n## Exit codes\n")
            .nth(1)
            .expect("docs/CLI.md has an \"Exit codes\" section");
        let section = section.split("\n## ").next().unwrap_or(section);
        let mut rows = Vec::new();
        for line in section.lines().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let Ok(code) = cells[0].parse::<u8>() else {
                continue;
            };
            assert_eq!(cells.len(), 3, "code | meaning | commands: {line}");
            let reasons = cells[1]
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|w| w.parse::<Reason>().ok())
                .collect();
            rows.push(Row {
                code,
                reasons,
                commands: cells[2].to_string(),
            });
        }
        assert!(rows.len() >= 6, "the table was not found");
        rows
    }

    #[test]
    fn the_exit_code_table_in_docs_cli_md_is_the_code() {
        let rows = doc_rows();
        for kind in [Script, Operator] {
            // Each reason a row names exits with the row's code where the row applies, and
            // with another code where it does not.
            for row in &rows {
                for &reason in &row.reasons {
                    let code = exit_code(&refusal(reason), kind);
                    if row.covers(kind) {
                        assert_eq!(
                            code, row.code,
                            "docs/CLI.md: `{reason}` exits {} ({kind:?}), the code says {code}",
                            row.code
                        );
                    } else {
                        assert_ne!(
                            code, row.code,
                            "docs/CLI.md: `{reason}` exits {} only for {}, the code says \
                             {code} for {kind:?} commands too",
                            row.code, row.commands
                        );
                    }
                }
            }
            // Every reason that does not exit with the catch-all 69 is named in the row of
            // its code.
            for reason in Reason::ALL {
                let code = exit_code(&refusal(reason), kind);
                if code != EXIT_BACKEND {
                    assert!(
                        rows.iter().any(|r| r.code == code
                            && r.covers(kind)
                            && r.reasons.contains(&reason)),
                        "`{reason}` exits {code} ({kind:?}): docs/CLI.md's row for {code} \
                         does not name it"
                    );
                }
            }
            // Every error's code has a row that covers its commands.
            for (e, _, _) in every_error() {
                let code = exit_code(&e, kind);
                assert!(
                    rows.iter().any(|r| r.code == code && r.covers(kind)),
                    "{e:?} exits {code} ({kind:?}): docs/CLI.md has no such row"
                );
            }
        }
    }
}
