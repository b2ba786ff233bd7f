//! What every subcommand shares: the runtime, logging and failure reports, signals, the
//! backend URL with its TLS flags, durations. The exit codes are the library's one map
//! ([`tenure::exit`]), re-exported here.
//!
//! Logs go to stderr, one line each, prefixed with a UTC timestamp ([`log`]); results go to
//! stdout ([`print_lines`]).

use std::io::Write as _;
use std::process::ExitCode;

pub use tenure::duration::parse as parse_duration;
pub use tenure::exit::{exit_code, Commands, EXIT_BACKEND, EXIT_LOST, EXIT_USAGE};
pub use tenure::supervise::{signal_name, Signals};
use tenure::Error;

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
        let said = e.to_string();
        for hint in tenure::admin::diagnose::hints(url).await {
            // The error may already be what the look finds (a plaintext URL at a TLS node).
            if !said.contains(&hint) {
                log(&format!("hint: {hint}"));
            }
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

/// `--backend`, else `$TENURE_BACKEND`, else the default; TLS files and token from the
/// flags, else the environment ([`tenure::environment`]).
pub fn backend_url(flag: Option<&str>, tls: &TlsFlags) -> String {
    let given = tenure::environment::Credentials {
        ca: tls.ca.clone(),
        cert: tls.cert.clone(),
        key: tls.key.clone(),
        token_file: tls.token_file.clone(),
    };
    tenure::environment::backend_url(flag, &given)
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
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
