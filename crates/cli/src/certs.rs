//! `tenure certs`: a CA and certificates for a cluster's nodes and clients.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tenure_transport::certs::{issue, CertsRequest};

/// Create a CA, node certificates and client certificates for a cluster (PEM files).
///
/// Meant for tests and first steps; a real PKI can issue the same shapes (see
/// docs/SECURITY.md). Node certificates carry `node-ID.CLUSTER.tenure` (the peer identity),
/// `localhost`, `127.0.0.1`, `::1` and every --host. Nothing is overwritten.
#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Directory to write into (created 0700; private keys are 0600).
    #[arg(long)]
    out: PathBuf,
    /// The cluster id the servers run with (`--cluster-id`, default `tenure`).
    #[arg(long, default_value = "tenure")]
    cluster_id: String,
    /// Node ids, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<u64>,
    /// Client names, comma-separated (each gets `client-NAME.pem` and its key).
    #[arg(long, value_delimiter = ',')]
    clients: Vec<String>,
    /// Another host name or IP address clients use to reach the nodes (repeatable).
    #[arg(long = "host")]
    hosts: Vec<String>,
    /// Validity in days.
    #[arg(long, default_value_t = 365)]
    days: u32,
}

/// Issue the certificates and list the files written.
pub fn run(args: CertsArgs) -> ExitCode {
    let request = CertsRequest {
        cluster_id: args.cluster_id,
        nodes: args.nodes,
        clients: args.clients,
        hosts: args.hosts,
        days: args.days,
    };
    match issue(&args.out, &request) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tenure certs: {e}");
            ExitCode::from(2)
        }
    }
}

/// Make a bearer token for a principal of the auth file.
///
/// Prints the token on stdout (store it in a file and give the client the file: `--token-file`,
/// `$TENURE_TOKEN_FILE`, or `token_file=` in a `tenure://` URL) and, on
/// stderr, the line that goes under `[tokens]` in the server's auth file: the token's
/// SHA-256, which is all the server keeps. The token itself is stored nowhere.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The principal the token authenticates (a name under `[principals]`).
    name: String,
}

/// Draw a token and print it with its auth-file line.
pub fn token(args: TokenArgs) -> ExitCode {
    if !tenure_server::auth::principal_name_ok(&args.name) {
        eprintln!(
            "tenure token: {:?} cannot be a principal: 1 to 63 lowercase letters, digits and inner hyphens",
            args.name
        );
        return ExitCode::from(2);
    }
    match tenure_server::auth::new_token() {
        Ok(token) => {
            eprintln!("add under [tokens] in the auth file:");
            eprintln!(
                "{} = \"{}\"",
                args.name,
                tenure_server::auth::token_hash_line(&token)
            );
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tenure token: {e}");
            ExitCode::FAILURE
        }
    }
}
