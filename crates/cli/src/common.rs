//! What every subcommand shares: the runtime, logging and failure reports, signals, the
//! backend URL with its TLS flags, durations. The exit codes are the library's one map
//! ([`tenure::exit`]), re-exported here.
//!
//! Logs go to stderr, one line each, prefixed with a UTC timestamp ([`log`]); results go to
//! stdout ([`print_lines`]).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::SystemTime;

pub use tenure::duration::parse as parse_duration;
pub use tenure::exit::{exit_code, Commands, EXIT_BACKEND, EXIT_LOST, EXIT_USAGE};
pub use tenure::supervise::{signal_name, Signals};
use tenure::Error;

/// The default backend when neither `--backend` nor `TENURE_BACKEND` is given.
pub const DEFAULT_BACKEND: &str = "tenure://127.0.0.1:8001";

/// Runs `f` on a current-thread runtime, to the exit code it returns.
pub fn block_on(f: impl std::future::Future<Output = u8>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => ExitCode::from(rt.block_on(f)),
        Err(e) => {
            log(&format!("error: cannot start the runtime: {e}"));
            ExitCode::from(EXIT_BACKEND)
        }
    }
}

/// Log `error: WHAT: E`, then what a second look at the URL's addresses finds when the
/// error may come from a wrong address; returns the exit code.
pub async fn fail(what: &str, url: &str, e: &Error) -> u8 {
    log(&format!("error: {what}: {e}"));
    if tenure::admin::diagnose::worth_a_look(e) {
        for hint in tenure::admin::diagnose::hints(url).await {
            log(&format!("hint: {hint}"));
        }
    }
    exit_code(e, Commands::Script)
}

/// An election name is refused before anything is contacted when it is empty.
pub fn check_election(name: &str) -> Result<(), u8> {
    if name.is_empty() {
        log("error: --election is empty; give the election's name (1 to 256 bytes)");
        return Err(EXIT_USAGE);
    }
    Ok(())
}

/// SIGINT, SIGTERM and SIGHUP handled ([`Signals::install`]); where that fails, the reason
/// is logged and the exit code returned.
pub fn install_signals() -> Result<Signals, u8> {
    Signals::install().map_err(|e| {
        log(&format!("error: cannot handle signals: {e}"));
        EXIT_BACKEND
    })
}

/// TLS files for a `tenure://` backend.
#[derive(Debug, Default, clap::Args)]
pub struct TlsFlags {
    /// The cluster's CA certificate (PEM): turns TLS on for a `tenure://` backend. Default
    /// `$TENURE_CA`.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<String>,
    /// A client certificate (PEM), with --key. Default `$TENURE_CERT`.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<String>,
    /// The client certificate's private key (PEM). Default `$TENURE_KEY`.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<String>,
    /// A file holding a bearer token (what `tenure token NAME` printed), sent with every
    /// request. Default `$TENURE_TOKEN_FILE`.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<String>,
}

/// `--backend`, else `$TENURE_BACKEND`, else [`DEFAULT_BACKEND`]. A `tenure://` URL without
/// a query takes its TLS files from `--ca`, `--cert`, `--key`, else from `$TENURE_CA`
/// (turns TLS on), `$TENURE_CERT` and `$TENURE_KEY` (a client certificate), and its bearer
/// token from `--token-file`, else `$TENURE_TOKEN_FILE`.
pub fn backend_url(flag: Option<&str>, tls: &TlsFlags) -> String {
    let url = flag
        .map(str::to_string)
        .or_else(|| env_nonempty("TENURE_BACKEND"))
        .unwrap_or_else(|| DEFAULT_BACKEND.to_string());
    with_tls_from_env(url, |var| {
        let flag = match var {
            "TENURE_CA" => &tls.ca,
            "TENURE_CERT" => &tls.cert,
            "TENURE_KEY" => &tls.key,
            "TENURE_TOKEN_FILE" => &tls.token_file,
            _ => &None,
        };
        flag.clone().or_else(|| env_nonempty(var))
    })
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

/// Appends `ca`, `cert`, `key` and `token_file` from `env` to a `tenure://` URL that has
/// no query.
fn with_tls_from_env(mut url: String, env: impl Fn(&str) -> Option<String>) -> String {
    if !url.starts_with("tenure://") || url.contains('?') {
        return url;
    }
    let params: Vec<String> = [
        ("ca", "TENURE_CA"),
        ("cert", "TENURE_CERT"),
        ("key", "TENURE_KEY"),
        ("token_file", "TENURE_TOKEN_FILE"),
    ]
    .into_iter()
    .filter_map(|(param, var)| env(var).map(|v| format!("{param}={v}")))
    .collect();
    if !params.is_empty() {
        url.push('?');
        url.push_str(&params.join("&"));
    }
    url
}

/// Writes lines to stdout; a reader that went away (`| head`) ends the output quietly.
pub fn print_lines(lines: &[String]) {
    let mut out = std::io::stdout().lock();
    for l in lines {
        if writeln!(out, "{l}").is_err() {
            return;
        }
    }
    let _ = out.flush();
}

/// Rows as columns padded to their widest cell (the last column is not padded).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut s = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            if i == last {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out
}

#[cfg(test)]
mod backend_url_tests {
    use super::with_tls_from_env;

    #[test]
    fn tls_files_come_from_the_environment_unless_the_url_names_its_own() {
        let env = |v: &str| match v {
            "TENURE_CA" => Some("/c/ca.pem".to_string()),
            "TENURE_CERT" => Some("/c/client-app.pem".to_string()),
            "TENURE_KEY" => Some("/c/client-app-key.pem".to_string()),
            _ => None,
        };
        assert_eq!(
            with_tls_from_env("tenure://h:1,h:2".into(), env),
            "tenure://h:1,h:2?ca=/c/ca.pem&cert=/c/client-app.pem&key=/c/client-app-key.pem"
        );
        assert_eq!(
            with_tls_from_env("tenure://h:1".into(), |v| (v == "TENURE_TOKEN_FILE")
                .then(|| "/run/token".to_string())),
            "tenure://h:1?token_file=/run/token"
        );
        assert_eq!(
            with_tls_from_env("tenure://h:1?ca=/x".into(), env),
            "tenure://h:1?ca=/x"
        );
        assert_eq!(with_tls_from_env("etcd://h:1".into(), env), "etcd://h:1");
        assert_eq!(
            with_tls_from_env("tenure://h:1".into(), |_| None),
            "tenure://h:1"
        );
    }
}

/// `HOSTNAME:PID`.
pub fn default_value() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".into()
    };
    format!("{host}:{}", std::process::id())
}

/// One line to stderr: `2026-11-29T11:36:22.123Z tenure[PID]: MESSAGE`.
pub fn log(msg: &str) {
    eprintln!("{} tenure[{}]: {msg}", utc_now(), std::process::id());
}

/// Now in UTC, ISO 8601 with milliseconds.
fn utc_now() -> String {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_shape() {
        let t = utc_now();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'), "{t}");
    }
}
