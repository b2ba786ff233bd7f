//! `tenure server`: run one node of a tenure cluster. Its flags and their merge with the
//! TOML file are `tenure_server::flags`; here are logging and the runtime.

use std::process::ExitCode;

use tenure_server::flags::{LogFormat, ServerArgs};
use tenure_server::Listeners;

/// Run the server until SIGINT or SIGTERM.
pub fn run(args: ServerArgs) -> ExitCode {
    let config = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tenure server: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(args.log_format());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let listeners = Listeners::bind(&config).await?;
        tenure_server::run(config, listeners, shutdown_signal()).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The level when RUST_LOG is unset or empty (or does not parse, which is said on stderr).
const DEFAULT_LOG_FILTER: &str = "info";

fn init_logging(format: LogFormat) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&spec)
            .unwrap_or_else(|e| {
            eprintln!(
                "tenure server: RUST_LOG={spec:?} does not parse ({e}); logging at {DEFAULT_LOG_FILTER}"
            );
            tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER)
        }),
        _ => tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        // Colours only for a person at a terminal, never in log files.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        // The event's fields at the top level, next to timestamp, level and target, so that
        // a pipeline reads `.event` and `.term` rather than `.fields.event`.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// Returns at SIGINT or SIGTERM (at SIGINT only where SIGTERM cannot be handled).
pub(crate) async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
