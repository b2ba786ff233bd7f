//! Certificates for a cluster's first steps and for tests (`tenure certs`): one CA, a
//! certificate per node carrying [`node_name`] (valid as TLS server and client, so the same
//! pair serves the peer port and the client port), and client certificates.
//!
//! For production, a real PKI can issue the same shapes; `docs/SECURITY.md` lists what each
//! certificate must carry.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use tenure_core::types::NodeId;

use crate::tls::{client_name, cluster_id_is_dns_label, node_name};

/// What to issue.
#[derive(Clone, Debug)]
pub struct CertsRequest {
    /// The cluster the node names belong to.
    pub cluster_id: String,
    /// Node ids to issue node certificates for.
    pub nodes: Vec<NodeId>,
    /// Client names (the principal a client certificate authenticates as).
    pub clients: Vec<String>,
    /// Extra host names or IP addresses clients use to reach the nodes (every node
    /// certificate carries them, with `localhost`, `127.0.0.1` and `::1`).
    pub hosts: Vec<String>,
    /// Validity in days from now.
    pub days: u32,
}

/// Why issuing failed.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A name cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// The file exists already; nothing is overwritten.
    #[error("{0} exists already; remove it or choose another directory (nothing was overwritten)")]
    Exists(PathBuf),
    /// Writing or reading failed.
    #[error("{path}: {why}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Reason.
        why: String,
    },
    /// Certificate generation failed.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

pub use crate::cert_files as files;

fn io_error(path: &Path, e: std::io::Error) -> CertsError {
    CertsError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

/// Writes `contents` to a new file; private keys are created 0600.
fn write_new(path: &Path, contents: &str, private: bool) -> Result<(), CertsError> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CertsError::Exists(path.to_path_buf())
        } else {
            io_error(path, e)
        }
    })?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(path, e))
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // An hour of slack for clocks that lag the issuer's.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

fn client_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Issues a new CA and the certificates into `dir` (created 0700 if missing) and returns
/// the files written. Nothing existing is overwritten: a directory that already holds a CA
/// is refused.
pub fn issue(dir: &Path, request: &CertsRequest) -> Result<Vec<PathBuf>, CertsError> {
    if !cluster_id_is_dns_label(&request.cluster_id) {
        return Err(CertsError::Invalid(format!(
            "cluster id {:?} cannot stand in a certificate name: use 1 to 63 lowercase letters, digits and inner hyphens",
            request.cluster_id
        )));
    }
    if request.days == 0 {
        return Err(CertsError::Invalid("--days must be at least 1".into()));
    }
    if let Some(bad) = request.nodes.iter().find(|id| **id == 0) {
        return Err(CertsError::Invalid(format!(
            "node id {bad} is reserved; ids start at 1"
        )));
    }
    if let Some(bad) = request.clients.iter().find(|c| !client_name_ok(c)) {
        return Err(CertsError::Invalid(format!(
            "client name {bad:?}: use 1 to 63 letters, digits, '-' and '_'"
        )));
    }
    let mut sans = vec![
        SanType::DnsName("localhost".try_into()?),
        SanType::IpAddress(IpAddr::from([127, 0, 0, 1])),
        SanType::IpAddress("::1".parse::<IpAddr>().expect("a valid address")),
    ];
    for host in &request.hosts {
        sans.push(match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.as_str().try_into().map_err(|_| {
                CertsError::Invalid(format!(
                    "--host {host:?} is neither an IP address nor a DNS name"
                ))
            })?),
        });
    }
    fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| io_error(dir, e))?;
    }
    let mut written = Vec::new();

    // The CA: a new one per run, so that one directory holds one cluster's material.
    let ca_path = dir.join(files::CA);
    let ca_key_path = dir.join(files::CA_KEY);
    for path in [&ca_path, &ca_key_path] {
        if path.exists() {
            return Err(CertsError::Exists(path.clone()));
        }
    }
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("tenure CA for cluster {}", request.cluster_id),
    );
    params.distinguished_name = dn;
    validity(&mut params, request.days);
    let key = KeyPair::generate()?;
    let key_pem = key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(params, key)?;
    write_new(&ca_key_path, &key_pem, true)?;
    written.push(ca_key_path);
    write_new(&ca_path, &ca.pem(), false)?;
    written.push(ca_path);

    let mut leaf = |common_name: String,
                    mut names: Vec<SanType>,
                    usages: Vec<ExtendedKeyUsagePurpose>,
                    cert_file: String,
                    key_file: String|
     -> Result<(), CertsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.subject_alt_names.append(&mut names);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages;
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, request.days);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &*ca)?;
        let (cert_path, key_path) = (dir.join(cert_file), dir.join(key_file));
        if cert_path.exists() {
            return Err(CertsError::Exists(cert_path));
        }
        write_new(&key_path, &key.serialize_pem(), true)?;
        write_new(&cert_path, &cert.pem(), false)?;
        written.push(cert_path);
        written.push(key_path);
        Ok(())
    };
    for &id in &request.nodes {
        let name = node_name(&request.cluster_id, id);
        let mut names = vec![SanType::DnsName(name.as_str().try_into()?)];
        names.extend(sans.iter().cloned());
        leaf(
            name,
            names,
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            files::node(id),
            files::node_key(id),
        )?;
    }
    for client in &request.clients {
        let principal = client_name(&request.cluster_id, client);
        leaf(
            client.clone(),
            vec![SanType::DnsName(principal.as_str().try_into()?)],
            vec![ExtendedKeyUsagePurpose::ClientAuth],
            files::client(client),
            files::client_key(client),
        )?;
    }
    // Each node's bundle: what to copy to that node, without the CA's key.
    let ca_pem = ca.pem();
    for &id in &request.nodes {
        let bundle = dir.join(files::node_dir(id));
        fs::create_dir(&bundle).map_err(|e| io_error(&bundle, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&bundle, fs::Permissions::from_mode(0o700))
                .map_err(|e| io_error(&bundle, e))?;
        }
        let read = |name: String| {
            let path = dir.join(name);
            fs::read_to_string(&path).map_err(|e| io_error(&path, e))
        };
        write_new(&bundle.join(files::CA), &ca_pem, false)?;
        write_new(
            &bundle.join(files::node(id)),
            &read(files::node(id))?,
            false,
        )?;
        write_new(
            &bundle.join(files::node_key(id)),
            &read(files::node_key(id))?,
            true,
        )?;
        written.push(bundle);
    }
    Ok(written)
}
