//! `tenure certs`: a CA and certificates for a cluster's nodes and clients.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tenure_transport::certs::{bundle_p12, files, issue, CertsError, CertsRequest};

/// Create a CA, node certificates and client certificates for a cluster (PEM files), or add
/// nodes and clients to the CA a directory already holds.
///
/// Meant for tests and first steps; a real PKI can issue the same shapes (see
/// docs/SECURITY.md). Node certificates carry `node-ID.CLUSTER.tenure` (the peer identity),
/// `localhost`, `127.0.0.1`, `::1` and every --host. A new CA also gets an `admin` client
/// (the principal that may change membership and move leadership by default). Nothing is
/// overwritten.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tenure certs --out certs --nodes 1,2,3 --clients app   # a new CA, nodes 1-3, app and admin
  tenure certs --out certs --clients billing             # one more client from the same CA
  tenure certs --out certs --nodes 4                     # a fourth node from the same CA
  tenure certs --out certs --p12 admin                   # admin's bundle for a browser")]
pub struct CertsArgs {
    /// Directory to write into (created 0700; private keys are 0600).
    #[arg(long)]
    out: PathBuf,
    /// The cluster id the servers run with (`--cluster-id`, default `tenure`).
    #[arg(long, default_value = "tenure")]
    cluster_id: String,
    /// Node ids, comma-separated (needed for a new CA; to add nodes to an existing one).
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<u64>,
    /// Client names, comma-separated (each gets `client-NAME.pem` and its key).
    #[arg(long, value_delimiter = ',')]
    clients: Vec<String>,
    /// Another host name or IP address clients use to reach the nodes (repeatable). Put on
    /// the node certificates of this run only: give them again when adding nodes later.
    #[arg(long = "host")]
    hosts: Vec<String>,
    /// Validity in days.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// Also write client NAME's certificate, key and the CA as `client-NAME.p12`, for a
    /// browser to import (the dashboard); its random password goes to
    /// `client-NAME.p12.password` (repeatable, comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    p12: Vec<String>,
}

/// The principal a new CA always gets a certificate for: the one the default policy lets
/// change membership and move leadership.
const ADMIN: &str = "admin";

/// Issue the certificates and list the files written.
pub fn run(args: CertsArgs) -> ExitCode {
    match certs(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure certs: {e}");
            ExitCode::from(2)
        }
    }
}

fn certs(args: CertsArgs) -> Result<(), CertsError> {
    let new_ca = !args.out.join(files::CA).exists() && !args.out.join(files::CA_KEY).exists();
    let mut clients = args.clients;
    if new_ca && !clients.iter().any(|c| c == ADMIN) {
        clients.push(ADMIN.to_string());
    }
    if new_ca && args.nodes.is_empty() {
        return Err(CertsError::Invalid(format!(
            "{} holds no CA yet: a new CA needs the cluster's nodes (--nodes 1,2,3)",
            args.out.display()
        )));
    }
    if !new_ca && args.nodes.is_empty() && clients.is_empty() && args.p12.is_empty() {
        return Err(CertsError::Invalid(format!(
            "{} holds a CA already: name what to add (--nodes, --clients or --p12)",
            args.out.display()
        )));
    }
    if !args.nodes.is_empty() || !clients.is_empty() || new_ca {
        let request = CertsRequest {
            cluster_id: args.cluster_id,
            nodes: args.nodes,
            clients,
            hosts: args.hosts,
            days: args.days,
        };
        for path in issue(&args.out, &request)? {
            println!("{}", path.display());
        }
    }
    for name in &args.p12 {
        let written = bundle_p12(&args.out, name)?;
        println!("{}", written.bundle.display());
        println!("{}", written.password_file.display());
        eprintln!(
            "tenure certs: import {} into the browser with the password in {}; it authenticates as {name}",
            written.bundle.display(),
            written.password_file.display()
        );
    }
    Ok(())
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
