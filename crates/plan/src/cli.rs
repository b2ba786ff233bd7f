//! `tenure plan`'s flags and runner (the `tenure` binary only dispatches here): check a
//! deployment's timing against the rules and estimate failover,
//! renewal traffic and false-failover risk (the arithmetic is `tenure-plan`'s).
//!
//! Inputs come from flags, from a TOML file (`--config FILE`, the flags' names with
//! underscores: `missed_beats = 5`, `ttl = "10s"`) and from a running node (`--from URL`, its
//! HTTP port: `/metrics` and `/status`). Flags override the file, which overrides what was
//! measured; what nobody gave is a default that says why. The report says where each
//! number came from.
//!
//! Exit codes: 0 every rule holds; 1 a rule is violated (the report says which input to
//! change); 2 a bad argument, naming the flag or the file's key; 69 `--from` failed (nothing
//! answers, TLS fails, the node refuses the credentials).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tenure::admin::http::NodeHttp;
use tenure::duration::parse as parse_duration;
use tenure::environment::Credentials;
use tenure::exit::{EXIT_BACKEND, EXIT_USAGE};

use crate::{Given, Input, Inputs, Plan, Source, Value};

/// Exit status when a rule is violated.
const EXIT_VIOLATED: u8 = 1;

/// `tenure plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// How often the Raft leader sends heartbeats (the server's `--heartbeat-ms`).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    heartbeat: Option<Duration>,
    /// How many heartbeat intervals a follower waits before it campaigns; without
    /// --election-timeout, the election timeout is missed beats × heartbeat.
    #[arg(long, value_parser = parse_count, value_name = "N")]
    missed_beats: Option<u64>,
    /// The shortest election timeout T (each is drawn from [T, 2T)).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    election_timeout: Option<Duration>,
    /// From a follower's timeout to a new leader (pre-vote, vote, durable vote).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    campaign: Option<Duration>,
    /// What the new leader (your application) needs before it does useful work.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    warm_up: Option<Duration>,
    /// The lease (session) TTL.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    ttl: Option<Duration>,
    /// How often a holder renews its lease (the tenure client: TTL/4).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    renew_interval: Option<Duration>,
    /// A message's delay at the 99th percentile.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    network_p99: Option<Duration>,
    /// The longest pause any process may take (GC, VM stall, swapping): sets both budgets
    /// below, each of which may be given on its own instead.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pause_budget: Option<Duration>,
    /// The longest pause the lease holder's process (your application) may take: its GC, a
    /// VM stall. Checked against the TTL.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    app_pause_budget: Option<Duration>,
    /// The longest pause a tenure server may take (a VM stall, swapping; it has no GC).
    /// Checked against the election timeout.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    server_pause_budget: Option<Duration>,
    /// How late a timer may fire on a busy machine.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    scheduling_jitter: Option<Duration>,
    /// How far the holder's and the server's clocks may disagree over one TTL.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    clock_skew: Option<Duration>,
    /// How many lease holders renew at once.
    #[arg(long, value_parser = parse_count, value_name = "N")]
    holders: Option<u64>,
    /// Voting members of the cluster.
    #[arg(long, value_parser = parse_count, value_name = "N")]
    cluster_size: Option<u64>,
    /// A TOML file of inputs (keys as the flags, with underscores; durations as strings).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Measure from a running node: the URL of its HTTP port (`http://HOST:PORT`, or
    /// `https://HOST:PORT` with --ca).
    #[arg(long, value_name = "URL")]
    from: Option<String>,
    /// For an https --from URL: the cluster's CA certificate (PEM). Default `$TENURE_CA`.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// A client certificate (PEM) to present, with --key. Default `$TENURE_CERT`.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM). Default `$TENURE_KEY`.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// A file holding a bearer token (what `tenure token NAME` printed) for the node's
    /// /metrics and /status. Default `$TENURE_TOKEN_FILE`.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    json: bool,
}

/// A count flag: a whole number (range checks are the library's, which name the input).
fn parse_count(s: &str) -> Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))
}

/// Why `tenure plan` stops early: its exit status and what to say.
struct Stop(u8, String);

fn usage(msg: impl Into<String>) -> Stop {
    Stop(EXIT_USAGE, msg.into())
}

/// `tenure plan`.
pub fn run(args: PlanArgs) -> ExitCode {
    match plan(&args) {
        Ok((plan, measured)) => {
            print(&plan, measured.as_ref(), args.json);
            if plan.rules_hold() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_VIOLATED)
            }
        }
        Err(Stop(code, msg)) => {
            eprintln!("tenure plan: {msg}");
            ExitCode::from(code)
        }
    }
}

/// What `--from` measured: where, and the notes to show.
struct MeasuredFrom {
    url: String,
    notes: Vec<String>,
}

fn plan(args: &PlanArgs) -> Result<(Plan, Option<MeasuredFrom>), Stop> {
    // Every argument is checked before anything is contacted.
    let flags = flag_values(args);
    let mut check = Given::default();
    for (input, value) in &flags {
        check
            .set(*input, *value, Source::Flag)
            .map_err(|e| usage(flag_error(*input, &e)))?;
    }
    let file = match &args.config {
        Some(path) => Some(read_config(path)?),
        None => None,
    };
    let target = match &args.from {
        Some(url) => Some(Target::new(url, args)?),
        None => None,
    };

    let mut given = Given::default();
    let mut measured = None;
    if let Some(target) = target {
        let m = measure(&target)?;
        for (input, value, how) in m.values {
            given
                .set(input, value, Source::Measured(how))
                .map_err(|e| Stop(EXIT_BACKEND, format!("--from {}: {e}", target.url)))?;
        }
        measured = Some(MeasuredFrom {
            url: target.url.clone(),
            notes: m.notes,
        });
    }
    if let (Some(path), Some(values)) = (&args.config, file) {
        let name = path.display().to_string();
        for (input, value) in values {
            given
                .set(input, value, Source::File(name.clone()))
                .map_err(|e| usage(format!("{name}: {e}")))?;
        }
    }
    for (input, value) in flags {
        given
            .set(input, value, Source::Flag)
            .map_err(|e| usage(flag_error(input, &e)))?;
    }
    let inputs = Inputs::resolve(&given).map_err(|e| {
        let where_ = match &e {
            crate::Error::Invalid { input, .. } => match given.get(*input) {
                Some((_, Source::Flag)) => input.flag(),
                Some((_, source)) => source.to_string(),
                None => input.flag(),
            },
            _ => String::new(),
        };
        usage(format!("{where_}: {e}"))
    })?;
    Ok((Plan::new(inputs), measured))
}

fn flag_error(input: Input, e: &crate::Error) -> String {
    match e {
        crate::Error::Invalid { why, .. } => format!("{}: {why}", input.flag()),
        other => format!("{}: {other}", input.flag()),
    }
}

fn flag_values(a: &PlanArgs) -> Vec<(Input, Value)> {
    let d = |i: Input, v: Option<Duration>| v.map(|v| (i, Value::Duration(v)));
    let c = |i: Input, v: Option<u64>| v.map(|v| (i, Value::Count(v)));
    [
        d(Input::Heartbeat, a.heartbeat),
        c(Input::MissedBeats, a.missed_beats),
        d(Input::ElectionTimeout, a.election_timeout),
        d(Input::Campaign, a.campaign),
        d(Input::WarmUp, a.warm_up),
        d(Input::Ttl, a.ttl),
        d(Input::RenewInterval, a.renew_interval),
        d(Input::NetworkP99, a.network_p99),
        d(Input::PauseBudget, a.pause_budget),
        d(Input::AppPauseBudget, a.app_pause_budget),
        d(Input::ServerPauseBudget, a.server_pause_budget),
        d(Input::SchedulingJitter, a.scheduling_jitter),
        d(Input::ClockSkew, a.clock_skew),
        c(Input::Holders, a.holders),
        c(Input::ClusterSize, a.cluster_size),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The inputs of a TOML file: every key must be an input, durations strings in the flags'
/// syntax (`"1.5s"`), counts positive integers. Nothing is used unless all of it is good.
fn read_config(path: &std::path::Path) -> Result<Vec<(Input, Value)>, Stop> {
    let name = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--config {name}: cannot read it: {e}")))?;
    parse_config(&text).map_err(|why| usage(format!("--config {name}: {why}")))
}

fn parse_config(text: &str) -> Result<Vec<(Input, Value)>, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("not valid TOML: {}", e.message()))?;
    let mut out = Vec::new();
    for (key, value) in &table {
        let input = Input::ALL
            .into_iter()
            .find(|i| i.key() == key)
            .ok_or_else(|| {
                format!(
                    "unknown key {key:?} (known: {})",
                    Input::ALL.map(Input::key).join(", ")
                )
            })?;
        let value = match (input.kind(), value) {
            (crate::Kind::Duration, toml::Value::String(s)) => {
                Value::Duration(parse_duration(s).map_err(|e| format!("{key}: {e}"))?)
            }
            (crate::Kind::Duration, other) => {
                return Err(format!(
                    "{key}: a duration is a string such as \"500ms\" or \"1.5s\", not {}",
                    other.type_str()
                ))
            }
            (crate::Kind::Count, toml::Value::Integer(n)) => {
                Value::Count(u64::try_from(*n).map_err(|_| format!("{key}: {n} is negative"))?)
            }
            (crate::Kind::Count, other) => {
                return Err(format!(
                    "{key}: a count is a whole number, not {}",
                    other.type_str()
                ))
            }
        };
        // The library's range checks, so that the message names the key.
        Given::default()
            .set(input, value, Source::Flag)
            .map_err(|e| match e {
                crate::Error::Invalid { why, .. } => format!("{key}: {why}"),
                other => other.to_string(),
            })?;
        out.push((input, value));
    }
    Ok(out)
}

// ------------------------------------------------------------------------------------------
// --from: the node's HTTP port.

/// A node's HTTP port, and how to talk to it.
struct Target {
    url: String,
    node: NodeHttp,
}

impl Target {
    /// Checks the URL and loads the TLS files and the token (flags, else the environment),
    /// contacting nothing.
    fn new(url: &str, args: &PlanArgs) -> Result<Target, Stop> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let credentials = Credentials {
            ca: path(&args.ca),
            cert: path(&args.cert),
            key: path(&args.key),
            token_file: path(&args.token_file),
        }
        .or_environment();
        if args.cert.is_some() && !url.starts_with("https://") {
            return Err(usage(format!("--from {url:?}: --cert needs an https URL")));
        }
        let node = NodeHttp::from_http_url(url, &credentials)
            .map_err(|why| usage(format!("--from {url:?}: {why}")))?;
        Ok(Target {
            url: url.to_string(),
            node,
        })
    }
}

fn measure(target: &Target) -> Result<crate::metrics::Measured, Stop> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Stop(EXIT_BACKEND, format!("cannot start the runtime: {e}")))?;
    rt.block_on(async {
        let unavailable = |what: &str, e: String| {
            Stop(
                EXIT_BACKEND,
                format!("--from {}: GET {what}: {e}", target.url),
            )
        };
        let metrics = target
            .node
            .get("/metrics")
            .await
            .map_err(|e| unavailable("/metrics", e))?;
        // The voter count and the timing are a bonus: a node that does not serve /status
        // (or an older one, without `timing`) still has metrics.
        let status: Option<serde_json::Value> = target
            .node
            .get("/status")
            .await
            .ok()
            .and_then(|body| serde_json::from_str(&body).ok());
        let voters = status
            .as_ref()
            .and_then(|v| Some(v.get("voters")?.as_array()?.len() as u64));
        let mut m = crate::metrics::measure(&metrics, voters)
            .map_err(|e| Stop(EXIT_BACKEND, format!("--from {}: {e}", target.url)))?;
        configured_timing(status.as_ref(), &mut m);
        Ok(m)
    })
}

/// The node's own heartbeat and election timeout, as it was configured (`timing` in its
/// `/status`): what its followers actually wait, not a default.
fn configured_timing(status: Option<&serde_json::Value>, m: &mut crate::metrics::Measured) {
    let Some(timing) = status.and_then(|s| s.get("timing")) else {
        m.notes.push(
            "the node's /status has no timing (an older server): the heartbeat and election \
             timeout are the defaults unless given"
                .into(),
        );
        return;
    };
    let ms = |key: &str| timing.get(key).and_then(serde_json::Value::as_u64);
    if let Some(h) = ms("heartbeat_ms").filter(|h| *h > 0) {
        m.values.push((
            Input::Heartbeat,
            Value::Duration(Duration::from_millis(h)),
            "the node's configured heartbeat_ms (/status)".into(),
        ));
    }
    if let Some(t) = ms("election_timeout_ms").filter(|t| *t > 0) {
        m.values.push((
            Input::ElectionTimeout,
            Value::Duration(Duration::from_millis(t)),
            "the node's configured election_timeout_ms (/status)".into(),
        ));
    }
    if timing
        .get("fast_election")
        .and_then(serde_json::Value::as_bool)
        == Some(true)
    {
        m.notes.push(
            "the node runs with fast election (the default): a leader whose process exits is replaced \
             in about a round trip; a frozen or cut-off leader still takes the election timeout"
                .into(),
        );
    }
}

// ------------------------------------------------------------------------------------------
// Output.

fn print(plan: &Plan, measured: Option<&MeasuredFrom>, json: bool) {
    use std::io::Write as _;
    let mut out = String::new();
    if json {
        let mut j = plan.json();
        if let (Some(m), Some(o)) = (measured, j.as_object_mut()) {
            o.insert(
                "measured".into(),
                serde_json::json!({"from": m.url, "notes": m.notes}),
            );
        }
        out.push_str(&j.to_string());
        out.push('\n');
    } else {
        if let Some(m) = measured {
            out.push_str(&format!("Measured from {}\n", m.url));
            for n in &m.notes {
                out.push_str(&format!("  - {n}\n"));
            }
            out.push('\n');
        }
        out.push_str(&plan.text());
    }
    // A reader that stopped early (`| head`) is not an error of ours.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toml_file_gives_durations_as_strings_and_counts_as_integers() {
        let v = parse_config("heartbeat = \"1s\"\nmissed_beats = 5\nwarm_up = \"2s\"\n")
            .expect("valid");
        assert_eq!(
            v,
            vec![
                (Input::Heartbeat, Value::Duration(Duration::from_secs(1))),
                (Input::MissedBeats, Value::Count(5)),
                (Input::WarmUp, Value::Duration(Duration::from_secs(2))),
            ]
        );
    }

    #[test]
    fn a_bad_toml_file_names_the_key() {
        let e = parse_config("heartbeats = \"1s\"\n").unwrap_err();
        assert!(
            e.starts_with("unknown key \"heartbeats\" (known: heartbeat, missed_beats"),
            "{e}"
        );
        for (toml, error) in [
            (
                "ttl = 10\n",
                "ttl: a duration is a string such as \"500ms\" or \"1.5s\", not integer",
            ),
            ("holders = -3\n", "holders: -3 is negative"),
            ("holders = 0\n", "holders: must be at least 1"),
            ("ttl = \"0s\"\n", "ttl: must be longer than zero"),
        ] {
            assert_eq!(parse_config(toml).unwrap_err(), error, "{toml:?}");
        }
        assert!(parse_config("ttl = \"-1s\"\n")
            .unwrap_err()
            .starts_with("ttl: "));
        assert!(parse_config("ttl = \n")
            .unwrap_err()
            .starts_with("not valid TOML"));
    }
}
