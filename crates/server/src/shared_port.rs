//! One port for several protocols: a node whose addresses name one port for peers, the
//! client API and/or HTTP (what an embedded node does, so that an application opens one
//! port for everything) accepts there once and sorts each connection by its first bytes,
//! which it only peeks at, so the protocol that gets the connection reads it whole:
//!
//! | first bytes                        | protocol                                   |
//! |------------------------------------|--------------------------------------------|
//! | `TNR1` (the peer frame magic)      | peer transport                             |
//! | `PRI ` (HTTP/2's preface)          | client API (gRPC, plaintext)               |
//! | an HTTP/1 method and a space       | HTTP                                       |
//! | a TLS ClientHello offering `http/1.1` | HTTP (browsers and curl offer it, and `h2`) |
//! | a TLS ClientHello offering `h2` only | client API (gRPC clients offer only `h2`)  |
//! | any other TLS ClientHello          | peer transport (its dialers offer no ALPN) |
//!
//! Anything else, a connection that says too little within the handshake timeout, and a
//! protocol this port does not carry, is closed. Each protocol then applies its own limits
//! and handshake (the peer transport its mutual TLS, the client and HTTP ports their gates).
//! At most `SORTING_MAX` connections are being sorted at once; more wait in the kernel's
//! accept queue.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tenure_transport::Incoming;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::rustls;

/// Connections whose first bytes are awaited at once.
pub(crate) const SORTING_MAX: usize = 256;

/// The bytes looked at, at most: a ClientHello is far smaller.
const PEEK_BYTES_MAX: usize = 16 * 1024;

/// The protocols a node serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    /// Raft between nodes.
    Peer,
    /// The gRPC client API.
    Client,
    /// `/metrics`, `/health`, `/status`, the dashboard.
    Http,
}

impl Protocol {
    /// The port's name in errors and logs.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Peer => "peer",
            Protocol::Client => "client",
            Protocol::Http => "http",
        }
    }
}

/// What the bytes seen so far say.
#[derive(Debug, PartialEq, Eq)]
enum Sorted {
    Is(Protocol),
    NeedMore,
    Unknown,
}

fn sort(bytes: &[u8]) -> Sorted {
    if bytes.first() == Some(&0x16) {
        return sort_tls(bytes);
    }
    if bytes.len() < 4 {
        return Sorted::NeedMore;
    }
    if bytes.starts_with(&tenure_transport::MAGIC) {
        return Sorted::Is(Protocol::Peer);
    }
    if bytes.starts_with(b"PRI ") {
        return Sorted::Is(Protocol::Client);
    }
    let method = bytes
        .iter()
        .take(8)
        .take_while(|b| b.is_ascii_uppercase())
        .count();
    match bytes.get(method) {
        Some(b' ') if method >= 3 => Sorted::Is(Protocol::Http),
        None if method == bytes.len() => Sorted::NeedMore,
        _ => Sorted::Unknown,
    }
}

/// A TLS connection, by the protocols its ClientHello offers (ALPN).
fn sort_tls(mut bytes: &[u8]) -> Sorted {
    let mut acceptor = rustls::server::Acceptor::default();
    if acceptor.read_tls(&mut bytes).is_err() {
        return Sorted::Unknown;
    }
    match acceptor.accept() {
        Ok(None) => Sorted::NeedMore,
        Err(_) => Sorted::Unknown,
        Ok(Some(accepted)) => {
            let offered: Vec<&[u8]> = accepted
                .client_hello()
                .alpn()
                .map(Iterator::collect)
                .unwrap_or_default();
            if offered.contains(&&b"http/1.1"[..]) {
                Sorted::Is(Protocol::Http)
            } else if offered.contains(&&b"h2"[..]) {
                Sorted::Is(Protocol::Client)
            } else {
                Sorted::Is(Protocol::Peer)
            }
        }
    }
}

/// Peek at `stream` until its protocol is known, the handshake time is up, or the peer
/// closes; nothing is read.
async fn sort_stream(stream: &TcpStream, handshake: Duration) -> Option<Protocol> {
    let mut buf = vec![0u8; PEEK_BYTES_MAX];
    let deadline = tokio::time::Instant::now() + handshake;
    let mut seen = 0;
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        match sort(&buf[..n]) {
            Sorted::Is(protocol) => return Some(protocol),
            Sorted::Unknown => return None,
            Sorted::NeedMore if n == buf.len() => return None,
            Sorted::NeedMore => {
                // `peek` returns at once while the bytes already seen are unread: wait a
                // little for the rest of a hello split over several segments.
                if n == seen {
                    tokio::time::sleep_until(
                        deadline.min(tokio::time::Instant::now() + Duration::from_millis(2)),
                    )
                    .await;
                }
                seen = n;
            }
        }
    }
}

/// Accept on `listener` and hand each connection to the one of `protocols` its first bytes
/// name. Returns each protocol's share of the port.
pub(crate) fn share(
    listener: TcpListener,
    protocols: &[Protocol],
    handshake: Duration,
) -> std::io::Result<BTreeMap<Protocol, Incoming>> {
    let local = listener.local_addr()?;
    let mut shares = BTreeMap::new();
    let mut senders = BTreeMap::new();
    for &protocol in protocols {
        let (tx, rx) = mpsc::channel(64);
        senders.insert(protocol, tx);
        shares.insert(protocol, Incoming::Handed { local, rx });
    }
    let sorting = Arc::new(Semaphore::new(SORTING_MAX));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = Arc::clone(&sorting).acquire_owned().await else {
                return;
            };
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(%local, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if senders.values().all(mpsc::Sender::is_closed) {
                return;
            }
            let senders = senders.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match sort_stream(&stream, handshake).await {
                    Some(protocol) => match senders.get(&protocol) {
                        Some(tx) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        None => tracing::debug!(
                            %peer,
                            %local,
                            "closing a {} connection: this port does not carry it",
                            protocol.name()
                        ),
                    },
                    None => tracing::debug!(
                        %peer,
                        %local,
                        "closing a connection that named no protocol in time"
                    ),
                }
            });
        }
    });
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_protocols_are_told_apart_by_their_first_bytes() {
        assert_eq!(sort(b"TNR1\x01\x01"), Sorted::Is(Protocol::Peer));
        assert_eq!(sort(b"PRI * HTTP/2.0\r\n"), Sorted::Is(Protocol::Client));
        assert_eq!(sort(b"GET /metrics HTTP/1.1"), Sorted::Is(Protocol::Http));
        assert_eq!(sort(b"POST /api"), Sorted::Is(Protocol::Http));
        assert_eq!(sort(b"DELETE /x"), Sorted::Is(Protocol::Http));
        assert_eq!(sort(b"TN"), Sorted::NeedMore);
        assert_eq!(sort(b"OPTIO"), Sorted::NeedMore);
        assert_eq!(sort(b"\x00\x00\x00\x00"), Sorted::Unknown);
        assert_eq!(sort(b"get / HTTP/1.1"), Sorted::Unknown);
        assert_eq!(sort(b"AB /"), Sorted::Unknown, "too short for a method");
    }

    fn client_hello(alpn: &[&[u8]]) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = rustls::pki_types::ServerName::try_from("node-1.test.tenure").expect("name");
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
        let mut hello = Vec::new();
        conn.write_tls(&mut hello).expect("hello");
        hello
    }

    #[test]
    fn tls_protocols_are_told_apart_by_the_protocols_offered() {
        assert_eq!(sort(&client_hello(&[b"h2"])), Sorted::Is(Protocol::Client));
        assert_eq!(
            sort(&client_hello(&[b"h2", b"http/1.1"])),
            Sorted::Is(Protocol::Http),
            "a browser offers both and speaks HTTP"
        );
        assert_eq!(
            sort(&client_hello(&[b"http/1.1"])),
            Sorted::Is(Protocol::Http)
        );
        assert_eq!(sort(&client_hello(&[])), Sorted::Is(Protocol::Peer));
        let hello = client_hello(&[b"h2"]);
        assert_eq!(sort(&hello[..hello.len() / 2]), Sorted::NeedMore);
        assert_eq!(
            sort(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]),
            Sorted::NeedMore
        );
        assert_eq!(
            sort(&[0x16, 0x09, 0x09, 0x00, 0x04, 1, 2, 3, 4]),
            Sorted::Unknown
        );
    }
}
