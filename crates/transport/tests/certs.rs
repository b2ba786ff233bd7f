//! `tenure certs` on a directory that already holds a CA: nodes and clients are added from
//! that CA (OpenSSL verifies them against the unchanged CA certificate), what would be
//! wrong is refused before anything is written, and a client's PKCS#12 bundle for a browser
//! holds exactly its certificate, its key and the CA, readable by OpenSSL with the password
//! written beside it.

use std::path::Path;
use std::process::Command;

use tenure_transport::certs::{bundle_p12, files, issue, CertsError, CertsRequest};

fn request(cluster_id: &str, nodes: Vec<u64>, clients: &[&str]) -> CertsRequest {
    CertsRequest {
        cluster_id: cluster_id.into(),
        nodes,
        clients: clients.iter().map(|c| c.to_string()).collect(),
        hosts: Vec::new(),
        days: 1,
    }
}

/// `openssl verify` of `file` against the directory's CA: an implementation other than ours.
fn openssl_verifies(dir: &Path, file: &str) -> bool {
    let out = Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(dir.join(files::CA))
        .arg(dir.join(file))
        .output()
        .expect("run openssl");
    out.status.success()
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn leaf_principal(dir: &Path, file: &str, cluster: &str) -> Option<String> {
    use rustls::pki_types::pem::PemObject as _;
    let der = rustls::pki_types::CertificateDer::from_pem_file(dir.join(file)).expect("pem");
    tenure_transport::tls::client_principal(&der, cluster)
}

#[test]
fn nodes_and_clients_are_added_from_the_ca_the_directory_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    issue(d, &request("prod", vec![1, 2, 3], &["app"])).expect("a new CA");
    let ca_before = std::fs::read(d.join(files::CA)).expect("ca");
    let key_before = std::fs::read(d.join(files::CA_KEY)).expect("ca key");

    let written = issue(d, &request("prod", vec![4], &["billing"])).expect("added");
    let written: Vec<String> = written
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert!(
        !written.iter().any(|w| w == files::CA || w == files::CA_KEY),
        "the CA is not written again: {written:?}"
    );
    assert_eq!(std::fs::read(d.join(files::CA)).expect("ca"), ca_before);
    assert_eq!(
        std::fs::read(d.join(files::CA_KEY)).expect("key"),
        key_before
    );
    for file in [files::node(1), files::node(4), files::client("billing")] {
        assert!(openssl_verifies(d, &file), "{file} verifies against the CA");
    }
    assert_eq!(
        leaf_principal(d, &files::client("billing"), "prod").as_deref(),
        Some("billing")
    );
    // The new node's bundle is what node 4 needs, with the same CA certificate.
    let bundle = d.join(files::node_dir(4));
    assert_eq!(
        std::fs::read(bundle.join(files::CA)).expect("bundle ca"),
        ca_before
    );
    assert!(bundle.join(files::node_key(4)).exists());
    assert!(!bundle.join(files::CA_KEY).exists());

    // A certificate from another CA does not verify: the check can fail.
    let other = tempfile::tempdir().expect("tempdir");
    issue(other.path(), &request("prod", vec![1], &[])).expect("another CA");
    std::fs::copy(other.path().join(files::node(1)), d.join("stranger.pem")).expect("copy");
    assert!(!openssl_verifies(d, "stranger.pem"));
}

#[test]
fn what_would_be_wrong_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    issue(d, &request("prod", vec![1, 2, 3], &["app"])).expect("a new CA");
    let before = names(d);

    // Another cluster's id: its node names would match no node of this CA's cluster.
    let e = issue(d, &request("staging", vec![4], &[])).expect_err("another cluster");
    assert!(
        e.to_string().contains("--cluster-id prod"),
        "the message says which cluster the CA is for: {e}"
    );
    // A client that exists, asked with a node that does not: neither is written.
    let e = issue(d, &request("prod", vec![5], &["app"])).expect_err("app exists");
    assert!(matches!(e, CertsError::Exists(_)), "{e}");
    assert_eq!(names(d), before, "nothing was written");

    // A CA certificate with another CA's key.
    let other = tempfile::tempdir().expect("tempdir");
    issue(other.path(), &request("prod", vec![1], &[])).expect("another CA");
    let mixed = tempfile::tempdir().expect("tempdir");
    std::fs::copy(d.join(files::CA), mixed.path().join(files::CA)).expect("copy");
    std::fs::copy(
        other.path().join(files::CA_KEY),
        mixed.path().join(files::CA_KEY),
    )
    .expect("copy");
    let e = issue(mixed.path(), &request("prod", vec![], &["x"])).expect_err("wrong key");
    assert!(e.to_string().contains("is not the key of"), "{e}");
    // A CA certificate without its key.
    std::fs::remove_file(mixed.path().join(files::CA_KEY)).expect("rm");
    let e = issue(mixed.path(), &request("prod", vec![], &["x"])).expect_err("no key");
    assert!(e.to_string().contains("but not its key"), "{e}");
    assert_eq!(names(mixed.path()), vec![files::CA.to_string()]);
}

#[test]
fn a_browser_bundle_holds_the_client_its_key_and_the_ca_under_a_random_password() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    issue(d, &request("prod", vec![1], &["admin"])).expect("a new CA");
    let written = bundle_p12(d, "admin").expect("bundle");
    assert_eq!(written.bundle, d.join(files::client_p12("admin")));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for path in [&written.bundle, &written.password_file] {
            let mode = std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
    }
    let password = std::fs::read_to_string(&written.password_file).expect("password");
    let password = password.trim();
    assert_eq!(password.len(), 32, "128 random bits in hex");

    // OpenSSL reads it with the password: the client's certificate, the CA's and one key,
    // the key being the client's.
    let out = Command::new("openssl")
        .args(["pkcs12", "-nodes", "-passin"])
        .arg(format!("file:{}", written.password_file.display()))
        .arg("-in")
        .arg(&written.bundle)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl pkcs12: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // OpenSSL 3.0 writes `subject=CN = admin`, later ones `subject=CN=admin`.
    let text = String::from_utf8_lossy(&out.stdout).replace(" = ", "=");
    assert_eq!(
        text.matches("-----BEGIN CERTIFICATE-----").count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches("-----BEGIN PRIVATE KEY-----").count(),
        1,
        "{text}"
    );
    assert!(text.contains("subject=CN=admin"), "{text}");
    assert!(
        text.contains("subject=CN=tenure CA for cluster prod"),
        "{text}"
    );
    let key_pem = std::fs::read_to_string(d.join(files::client_key("admin"))).expect("key");
    let der_of = |pem: &str| {
        use rustls::pki_types::pem::PemObject as _;
        rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .expect("key pem")
            .secret_pkcs8_der()
            .to_vec()
    };
    let start = text
        .find("-----BEGIN PRIVATE KEY-----")
        .expect("key in output");
    assert_eq!(
        der_of(&text[start..]),
        der_of(&key_pem),
        "the client's own key"
    );

    // The wrong password opens nothing.
    let out = Command::new("openssl")
        .args([
            "pkcs12",
            "-nodes",
            "-passin",
            "pass:0123456789abcdef0123456789abcdef",
        ])
        .arg("-in")
        .arg(&written.bundle)
        .output()
        .expect("run openssl");
    assert!(!out.status.success(), "a wrong password is refused");

    // Nothing is overwritten, and a client that was never issued is named.
    assert!(matches!(
        bundle_p12(d, "admin").expect_err("exists"),
        CertsError::Exists(_)
    ));
    let e = bundle_p12(d, "nobody").expect_err("no such client");
    assert!(e.to_string().contains("--clients nobody"), "{e}");
}
