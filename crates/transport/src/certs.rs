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
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
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
    write_new_bytes(path, contents.as_bytes(), private)
}

/// A password for a bundle: 128 random bits as 32 hex digits (typed or pasted once, when
/// the bundle is imported).
fn new_password() -> Result<String, CertsError> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| CertsError::Invalid(format!("the OS random source failed: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `contents` to a new file; private ones are created 0600.
fn write_new_bytes(path: &Path, contents: &[u8], private: bool) -> Result<(), CertsError> {
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
    file.write_all(contents)
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

/// A new CA for `cluster_id`, and its certificate in PEM.
fn new_ca(cluster_id: &str, days: u32) -> Result<(Issuer<'static, KeyPair>, String), CertsError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{CA_NAME_PREFIX}{cluster_id}"));
    params.distinguished_name = dn;
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((Issuer::new(params, key), cert.pem()))
}

/// The common name of a CA `tenure certs` made, before its cluster id.
const CA_NAME_PREFIX: &str = "tenure CA for cluster ";

/// The CA already in a directory, with its key. A CA that `tenure certs` made names its
/// cluster: adding certificates for another cluster id to it is refused (they would carry
/// names no node of that CA's cluster answers to). A CA from elsewhere is taken as it is.
fn load_ca(
    ca_path: &Path,
    key_path: &Path,
    cluster_id: &str,
) -> Result<(Issuer<'static, KeyPair>, String), CertsError> {
    let read = |path: &Path| fs::read_to_string(path).map_err(|e| io_error(path, e));
    let (pem, key_pem) = (read(ca_path)?, read(key_path)?);
    let key = KeyPair::from_pem(&key_pem).map_err(|e| {
        CertsError::Invalid(format!(
            "{}: not a private key in PEM: {e}",
            key_path.display()
        ))
    })?;
    let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| {
            CertsError::Invalid(format!(
                "{}: not a certificate in PEM: {e}",
                ca_path.display()
            ))
        })?
        .1
        .contents;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
        CertsError::Invalid(format!(
            "{}: not an X.509 certificate: {e}",
            ca_path.display()
        ))
    })?;
    if !cert.is_ca() {
        return Err(CertsError::Invalid(format!(
            "{} is not a CA certificate",
            ca_path.display()
        )));
    }
    if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
        return Err(CertsError::Invalid(format!(
            "{} is not the key of {}",
            key_path.display(),
            ca_path.display()
        )));
    }
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default();
    if let Some(theirs) = common_name.strip_prefix(CA_NAME_PREFIX) {
        if theirs != cluster_id {
            return Err(CertsError::Invalid(format!(
                "the CA in {} is cluster {theirs:?}'s, not {cluster_id:?}: pass --cluster-id {theirs}",
                ca_path.display()
            )));
        }
    }
    let issuer = Issuer::from_ca_cert_der(&der.as_slice().into(), key)?;
    Ok((issuer, pem))
}

/// Issues certificates into `dir` (created 0700 if missing) and returns the files written.
/// A directory that holds no CA gets a new one; one that holds a CA and its key gets certificates from that CA, so nodes and clients can be
/// added to a running cluster. Nothing existing is overwritten: a certificate asked for
/// that exists already is refused before anything is written.
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

    // The CA: a new one, or the one this directory already holds (adding nodes and
    // clients to a running cluster). Its key never leaves this directory.
    let ca_path = dir.join(files::CA);
    let ca_key_path = dir.join(files::CA_KEY);
    let (ca, ca_pem): (Issuer<'static, KeyPair>, String) =
        match (ca_path.exists(), ca_key_path.exists()) {
            (true, true) => load_ca(&ca_path, &ca_key_path, &request.cluster_id)?,
            (false, false) => {
                let (ca, pem) = new_ca(&request.cluster_id, request.days)?;
                write_new(&ca_key_path, &ca.key().serialize_pem(), true)?;
                written.push(ca_key_path);
                write_new(&ca_path, &pem, false)?;
                written.push(ca_path);
                (ca, pem)
            }
            (true, false) => {
                return Err(CertsError::Invalid(format!(
            "{} holds {} but not its key {}: certificates can only be added where the CA's key is",
            dir.display(), files::CA, files::CA_KEY
        )))
            }
            (false, true) => {
                return Err(CertsError::Invalid(format!(
                    "{} holds {} but not the CA certificate {}",
                    dir.display(),
                    files::CA_KEY,
                    files::CA
                )))
            }
        };
    // Refuse before writing anything if a certificate asked for exists already.
    let wanted = request
        .nodes
        .iter()
        .map(|&id| dir.join(files::node(id)))
        .chain(
            request
                .nodes
                .iter()
                .map(|&id| dir.join(files::node_dir(id))),
        )
        .chain(request.clients.iter().map(|c| dir.join(files::client(c))));
    for path in wanted {
        if path.exists() {
            return Err(CertsError::Exists(path));
        }
    }

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
        let cert = params.signed_by(&key, &ca)?;
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

/// What [`bundle_p12`] wrote.
#[derive(Debug)]
pub struct P12Bundle {
    /// `client-NAME.p12`: the client's certificate, its key and the CA certificate.
    pub bundle: PathBuf,
    /// `client-NAME.p12.password`: the password the bundle is encrypted with (0600).
    pub password_file: PathBuf,
}

/// Writes client `name`'s certificate, private key and the CA certificate of `dir` as one
/// PKCS#12 file, `client-NAME.p12`, for a browser to import (and present to a node's
/// dashboard). The bundle is encrypted (PBES2 with AES-256 and HMAC-SHA-256, as current
/// browsers and OpenSSL 3 read it) with a fresh random password, written beside it in
/// `client-NAME.p12.password` (0600). The client's certificate must exist already
/// (`tenure certs --clients NAME`). Nothing is overwritten.
pub fn bundle_p12(dir: &Path, name: &str) -> Result<P12Bundle, CertsError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

    let cert_path = dir.join(files::client(name));
    let key_path = dir.join(files::client_key(name));
    if !cert_path.exists() {
        return Err(CertsError::Invalid(format!(
            "{} does not exist: issue the client first (tenure certs --out {} --clients {name})",
            cert_path.display(),
            dir.display()
        )));
    }
    let bundle = dir.join(files::client_p12(name));
    let password_file = dir.join(format!("{}.password", files::client_p12(name)));
    for path in [&bundle, &password_file] {
        if path.exists() {
            return Err(CertsError::Exists(path.to_path_buf()));
        }
    }
    let pem_error = |path: &Path, e: rustls::pki_types::pem::Error| {
        CertsError::Invalid(format!("{}: {e}", path.display()))
    };
    let leaf = CertificateDer::from_pem_file(&cert_path).map_err(|e| pem_error(&cert_path, e))?;
    let ca_path = dir.join(files::CA);
    let ca = CertificateDer::from_pem_file(&ca_path).map_err(|e| pem_error(&ca_path, e))?;
    let key = PrivatePkcs8KeyDer::from_pem_file(&key_path).map_err(|e| pem_error(&key_path, e))?;
    let p12_error = |e: p12_keystore::error::Error| {
        CertsError::Invalid(format!("cannot make a PKCS#12 bundle: {e}"))
    };
    let chain = [leaf.as_ref(), ca.as_ref()]
        .into_iter()
        .map(p12_keystore::Certificate::from_der)
        .collect::<Result<Vec<_>, _>>()
        .map_err(p12_error)?;
    let key = p12_keystore::PrivateKey::from_der(key.secret_pkcs8_der()).map_err(p12_error)?;
    // The local key id ties the key to its certificate inside the bundle.
    let key_id = format!("tenure client {name}");
    let mut store = p12_keystore::KeyStore::new();
    store.add_entry(
        name,
        p12_keystore::KeyStoreEntry::PrivateKeyChain(p12_keystore::PrivateKeyChain::new(
            key_id, key, chain,
        )),
    );
    let password = new_password()?;
    let der = store
        .writer(&password)
        .encryption_algorithm(p12_keystore::EncryptionAlgorithm::PbeWithHmacSha256AndAes256)
        .mac_algorithm(p12_keystore::MacAlgorithm::HmacSha256)
        .write()
        .map_err(p12_error)?;
    write_new(&password_file, &format!("{password}\n"), true)?;
    write_new_bytes(&bundle, &der, true)?;
    Ok(P12Bundle {
        bundle,
        password_file,
    })
}
