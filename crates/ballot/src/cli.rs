//! `tenure ballot`'s flags and runner: serves the ballot page on a local address.
//!
//! The page and its engine run in this process: a cluster of real tenure-core nodes that
//! moves only when the person at the page says so. Prints `ballot: http://ADDR/` once it
//! listens (port 0 picks a free port) and serves until SIGINT or SIGTERM.

use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;

/// Arguments of `tenure ballot`.
#[derive(Debug, clap::Args)]
pub struct BallotArgs {
    /// Where to serve the page (port 0: any free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:7480")]
    pub listen: SocketAddr,
}

/// Runs `tenure ballot` until `shutdown` completes (the binary's SIGINT or SIGTERM).
pub fn run(args: BallotArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure ballot: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tenure ballot: cannot listen on {}: {e}", args.listen);
                return ExitCode::from(2);
            }
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("tenure ballot: {e}");
                return ExitCode::FAILURE;
            }
        };
        // Printed after binding, so that whoever started us can connect at once.
        println!("ballot: http://{addr}/");
        match crate::serve::serve(listener, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tenure ballot: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
