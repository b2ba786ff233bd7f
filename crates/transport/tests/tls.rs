//! Mutual TLS on the peer port: certified nodes talk; a stranger without a certificate from
//! the cluster's CA, a certificate from another CA, and a real node's certificate used to
//! speak for another node are all refused before any of their frames reaches the node.
//!
//! Node 1 is the transport under test, node 2 a real peer. Node 3 is a configured peer
//! that never runs; the raw clients borrow its id.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tenure_transport::certs::{files, issue, CertsRequest};
use tenure_transport::{encode_frame, PeerTls, TlsFiles, TlsMaterial, Transport};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;

fn issue_into(dir: &Path, cluster_id: &str, nodes: Vec<u64>) {
    issue(
        dir,
        &CertsRequest {
            cluster_id: cluster_id.into(),
            nodes,
            clients: vec!["app".into()],
            hosts: Vec::new(),
            days: 1,
        },
    )
    .expect("certificates issued");
}

fn material(dir: &Path, id: u64) -> TlsMaterial {
    TlsMaterial::load(&TlsFiles {
        ca: dir.join(files::CA),
        cert: dir.join(files::node(id)),
        key: dir.join(files::node_key(id)),
    })
    .expect("material loads")
}

struct Setup {
    _dir: tempfile::TempDir,
    node1: Node,
    node2: Node,
}

impl Setup {
    fn certs(&self) -> &Path {
        self._dir.path()
    }
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    issue_into(dir.path(), CLUSTER, vec![1, 2, 3]);
    let nodes = pair(&[3], |cfg| {
        let id = cfg.id;
        cfg.tls = Some(PeerTls::new(&material(dir.path(), id)).expect("tls"));
    })
    .await;
    wait_all_connected(&nodes).await;
    let [node1, node2] = nodes;
    Setup {
        _dir: dir,
        node1,
        node2,
    }
}

/// A hello claiming `claimed`, then a message from it, written on `stream`.
async fn speak_as<S: AsyncWrite + Unpin>(stream: &mut S, claimed: u64, term: u64) {
    let mut bytes = hello(CLUSTER, claimed);
    bytes.extend(encode_frame(&message(claimed, 1, term)).expect("encodes"));
    // The node may close while we write; what matters is what it delivers.
    let _ = stream.write_all(&bytes).await;
    let _ = stream.flush().await;
}

/// Nothing from the stranger reached the consensus side, and the real peer still gets
/// through both ways.
async fn nothing_delivered_and_still_serving(s: &mut Setup, forged_term: u64) {
    s.node2
        .handle
        .send(message(2, 1, 7))
        .expect("queued at node 2");
    let got = recv(&mut s.node1.inbound).await;
    assert_ne!(
        got.term, forged_term,
        "a forged frame was delivered: {got:?}"
    );
    assert_eq!((got.from, got.term), (2, 7));
    s.node1
        .handle
        .send(message(1, 2, 8))
        .expect("queued at node 1");
    assert_eq!(recv(&mut s.node2.inbound).await.term, 8);
}

/// Waits until node 1 has counted exactly one refused handshake.
async fn refusal_counted(s: &Setup) {
    let handle = s.node1.handle.clone();
    wait_until("the refusal to be counted", move || {
        handle.metrics().handshake_failures == 1
    })
    .await;
}

async fn tls_client(
    s: &Setup,
    material: &TlsMaterial,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(
        material.client_config().expect("client config"),
    ));
    let tcp = TcpStream::connect(s.node1.addr).await?;
    let name = ServerName::try_from(tenure_transport::node_name(CLUSTER, 1)).expect("name");
    connector.connect(name, tcp).await
}

#[tokio::test]
async fn certified_nodes_exchange_messages_over_tls() {
    let mut s = setup().await;
    nothing_delivered_and_still_serving(&mut s, 0).await;
    assert_eq!(s.node1.handle.metrics().handshake_failures, 0);
}

#[tokio::test]
async fn plaintext_frames_are_refused_before_any_is_read() {
    let mut s = setup().await;
    let mut stream = TcpStream::connect(s.node1.addr).await.expect("connect");
    speak_as(&mut stream, 3, 999).await;
    let mut buf = [0u8; 64];
    // The node answers the garbage "ClientHello" with at most a TLS alert, then closes.
    let _ = bounded("the node to close", async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await;
    refusal_counted(&s).await;
    nothing_delivered_and_still_serving(&mut s, 999).await;
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let mut s = setup().await;
    let other = tempfile::tempdir().expect("tempdir");
    issue_into(other.path(), CLUSTER, vec![3]);
    // TLS 1.3: the client may finish before the server rejects its certificate; the server
    // then closes without reading a frame.
    if let Ok(mut stream) = tls_client(&s, &material(other.path(), 3)).await {
        speak_as(&mut stream, 3, 999).await;
        let mut buf = [0u8; 16];
        let _ = bounded("the node to close", stream.read(&mut buf)).await;
    }
    refusal_counted(&s).await;
    nothing_delivered_and_still_serving(&mut s, 999).await;
}

#[tokio::test]
async fn a_node_certificate_cannot_speak_for_another_node() {
    let mut s = setup().await;
    // Node 3's genuine certificate, claiming to be node 2.
    let mut stream = tls_client(&s, &material(s.certs(), 3))
        .await
        .expect("node 3's certificate is valid");
    speak_as(&mut stream, 2, 999).await;
    let mut buf = [0u8; 16];
    let _ = bounded("the node to close", stream.read(&mut buf)).await;
    refusal_counted(&s).await;
    nothing_delivered_and_still_serving(&mut s, 999).await;

    // The same certificate speaking as itself is accepted: the refusal was the name.
    let mut stream = tls_client(&s, &material(s.certs(), 3))
        .await
        .expect("connect");
    speak_as(&mut stream, 3, 555).await;
    let got = recv(&mut s.node1.inbound).await;
    assert_eq!((got.from, got.term), (3, 555));
}

#[tokio::test]
async fn a_dialer_refuses_a_node_whose_certificate_names_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    issue_into(dir.path(), CLUSTER, vec![1, 2]);
    let (l1, l2) = (bind().await, bind().await);
    let a2 = l2.local_addr().expect("addr");
    let a1 = l1.local_addr().expect("addr");
    // Node 2 listens with node 1's certificate: node 1 must not take it for node 2.
    let mut cfg2 = config(2, l2, BTreeMap::from([(1, a1)]));
    cfg2.tls = Some(PeerTls::new(&material(dir.path(), 1)).expect("tls"));
    let (two, _inbound2) = Transport::start(cfg2).expect("start node 2");
    let mut cfg1 = config(1, l1, BTreeMap::from([(2, a2)]));
    cfg1.tls = Some(PeerTls::new(&material(dir.path(), 1)).expect("tls"));
    let (one, _inbound1) = Transport::start(cfg1).expect("start node 1");
    let handle = one.clone();
    wait_until("node 1's dial attempts to fail", move || {
        handle.metrics().connect_failures >= 2
    })
    .await;
    assert!(!one.peer_states()[&2].outbound_connected);
    tokio::time::sleep(Duration::from_millis(50)).await;
    one.shutdown().await;
    two.shutdown().await;
}

#[test]
fn tls_needs_a_cluster_id_that_fits_a_certificate_name() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        issue_into(dir.path(), "c", vec![1]);
        let mut cfg = tenure_transport::TransportConfig::new(
            1,
            "Not A Label",
            bind().await,
            BTreeMap::<u64, std::net::SocketAddr>::new(),
        );
        cfg.tls = Some(PeerTls::new(&material(dir.path(), 1)).expect("tls"));
        let err = Transport::start(cfg).expect_err("refused");
        assert!(err.to_string().contains("cannot be used with TLS"), "{err}");
    });
}

/// A client certificate names its principal; a node's certificate, another cluster's
/// client certificate and garbage name none.
#[test]
fn client_certificates_name_their_principal_and_nothing_else_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    issue_into(dir.path(), CLUSTER, vec![1]);
    let other = tempfile::tempdir().expect("tempdir");
    issue_into(other.path(), "elsewhere", vec![1]);
    let leaf = |dir: &Path, file: String| {
        let pem = std::fs::read(dir.join(file)).expect("read certificate");
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(&pem).expect("pem")
    };
    let principal = tenure_transport::tls::client_principal;
    assert_eq!(
        principal(&leaf(dir.path(), files::client("app")), CLUSTER).as_deref(),
        Some("app")
    );
    assert_eq!(principal(&leaf(dir.path(), files::node(1)), CLUSTER), None);
    assert_eq!(
        principal(&leaf(other.path(), files::client("app")), CLUSTER),
        None,
        "another cluster's client"
    );
    let garbage = tokio_rustls::rustls::pki_types::CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]);
    assert_eq!(principal(&garbage, CLUSTER), None);
}

/// `tenure certs` writes, for each node, a directory to copy to that node as its
/// `--tls-dir`: the CA certificate, the node's certificate and key, and nothing else, in
/// particular not the CA's key (with which a stolen node could issue itself any name). The
/// bundle's files are the flat ones, and its key is 0600 in a 0700 directory.
#[test]
fn each_node_bundle_holds_its_own_key_and_the_ca_certificate_but_never_the_ca_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    issue_into(dir.path(), "prod", vec![1, 2]);
    for id in [1u64, 2] {
        let bundle = dir.path().join(files::node_dir(id));
        let mut names: Vec<String> = std::fs::read_dir(&bundle)
            .expect("the bundle exists")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        let mut expected = vec![files::CA.to_string(), files::node(id), files::node_key(id)];
        expected.sort();
        assert_eq!(names, expected, "node {id}'s bundle");
        for name in &names {
            assert_eq!(
                std::fs::read(bundle.join(name)).expect("read"),
                std::fs::read(dir.path().join(name)).expect("read"),
                "{name} is the issued one"
            );
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode(&bundle), 0o700);
            assert_eq!(mode(&bundle.join(files::node_key(id))), 0o600);
        }
        // The bundle is enough to speak TLS as the node.
        let files = TlsFiles {
            ca: bundle.join(files::CA),
            cert: bundle.join(files::node(id)),
            key: bundle.join(files::node_key(id)),
        };
        TlsMaterial::load(&files).expect("the bundle loads");
    }
}
