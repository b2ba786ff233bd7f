//! An anonymous connection flood, the same against every system: from eight loopback
//! addresses per node, TLS connections that present no client certificate, each opened
//! again as soon as the node closes or refuses it. tenure with TLS finishes the handshake,
//! admits such a connection into its small unauthenticated pool and closes it at its
//! deadline; etcd with client-certificate authentication refuses it at the handshake. Each
//! side's answer costs the node what it costs, and the `flood` scenario measures what that
//! does to a legitimate client's writes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpSocket;
use tokio::task::JoinHandle;
use tokio_rustls::rustls;

/// Attacking addresses per node.
pub const ADDRESSES: u8 = 8;
/// Connections each attacking address keeps open (or keeps trying to) against one node.
pub const CONNECTIONS_PER_ADDRESS: usize = 24;

/// The HTTP/2 client preface and an empty SETTINGS frame: what a gRPC client sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The running flood.
pub struct Flood {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    /// Connections that finished the TLS handshake.
    pub opened: Arc<AtomicU64>,
    /// Connections refused, or closed by the node.
    pub ended: Arc<AtomicU64>,
}

impl Flood {
    /// Start flooding `targets` (client ports speaking TLS, trusting the CA at `ca`).
    pub fn start(targets: &[SocketAddr], ca: &Path) -> anyhow::Result<Flood> {
        let tls = anonymous_connector(ca, b"h2")?;
        let stop = Arc::new(AtomicBool::new(false));
        let (opened, ended) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut tasks = Vec::new();
        for (i, &to) in targets.iter().enumerate() {
            for a in 0..ADDRESSES {
                let octet = 10 + a + ADDRESSES * i as u8;
                for _ in 0..CONNECTIONS_PER_ADDRESS {
                    tasks.push(tokio::spawn(hold(
                        tls.clone(),
                        octet,
                        to,
                        Arc::clone(&stop),
                        Arc::clone(&opened),
                        Arc::clone(&ended),
                    )));
                }
            }
        }
        Ok(Flood {
            stop,
            tasks,
            opened,
            ended,
        })
    }

    /// Stop every attacker.
    pub async fn stop(self) {
        self.stop.store(true, Relaxed);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

/// The client TLS of an anonymous attacker: trusts the CA at `ca`, presents no certificate,
/// offers application protocol `alpn`.
pub fn anonymous_connector(ca: &Path, alpn: &[u8]) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).context("read the CA")? {
        roots.add(cert.context("a CA certificate")?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// A TLS session with `to` from 127.0.0.`octet`, or `None` if it cannot be had within 5 s.
pub async fn open_from(
    tls: &tokio_rustls::TlsConnector,
    octet: u8,
    to: SocketAddr,
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let opened = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, octet)),
            0,
        ))?;
        let tcp = socket.connect(to).await?;
        tls.connect(
            rustls::pki_types::ServerName::IpAddress(to.ip().into()),
            tcp,
        )
        .await
    };
    tokio::time::timeout(Duration::from_secs(5), opened)
        .await
        .ok()?
        .ok()
}

/// Keep one anonymous connection open against `to` from 127.0.0.`octet`: TLS without a
/// certificate, the HTTP/2 preface, then read until the node closes it; again at once.
async fn hold(
    tls: tokio_rustls::TlsConnector,
    octet: u8,
    to: SocketAddr,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
    ended: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 4096];
    while !stop.load(Relaxed) {
        let Some(mut stream) = open_from(&tls, octet, to).await else {
            ended.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        opened.fetch_add(1, Relaxed);
        if stream.write_all(H2_PREFACE).await.is_ok() {
            // Read (and drop) whatever the node says until it closes the connection.
            while !stop.load(Relaxed) {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        ended.fetch_add(1, Relaxed);
    }
}
