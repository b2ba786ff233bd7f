//! `tenure get`, `tenure put`, `tenure delete` and `tenure delete-election`.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Value};
use tenure::admin::Failure;
use tenure::lines;

use super::{connect, one_line, Target};
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

/// `tenure get`.
pub fn get(args: GetArgs) -> ExitCode {
    let what = format!(
        "cannot read key \"{}\"",
        lines::escape_value(args.fenced_key.as_bytes())
    );
    one_line(what, async move { get_inner(&args).await })
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
    let what = format!(
        "put of key \"{}\" refused",
        lines::escape_value(args.fenced_key.as_bytes())
    );
    one_line(what, async move { put_inner(&args).await })
}

/// The checks of a fenced write (`put`, `delete`): a key and an election are named; its
/// token ([`put_token`]).
fn fenced_write_token(key: &str, election: &str, token: Option<u64>) -> Result<u64, Failure> {
    if key.is_empty() {
        return Err(Failure::Usage("the key is empty".into()));
    }
    if election.is_empty() {
        return Err(Failure::Usage("--election is empty".into()));
    }
    put_token(token, std::env::var_os("TENURE_FENCING_TOKEN")).map_err(Failure::Usage)
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
    let token = fenced_write_token(&args.fenced_key, &args.election, args.token)?;
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
    let what = format!(
        "delete of key \"{}\" refused",
        lines::escape_value(args.fenced_key.as_bytes())
    );
    one_line(what, async move { delete_inner(&args).await })
}

async fn delete_inner(args: &DeleteArgs) -> Result<String, Failure> {
    let token = fenced_write_token(&args.fenced_key, &args.election, args.token)?;
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
    let what = format!(
        "delete of election \"{}\" refused",
        lines::escape_value(args.election.as_bytes())
    );
    one_line(what, async move { delete_election_inner(&args).await })
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
}
