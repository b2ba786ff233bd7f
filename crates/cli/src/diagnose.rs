//! Why a `tenure://` backend did not answer, in words a person can act on.
//!
//! When a request to the cluster fails for want of an answer (unavailable, outcome unknown,
//! TLS, a protocol error), the script commands and `tenure run` look at each address of the
//! URL once more and say what they find: nothing listening there, or a node's HTTP port
//! (it answers HTTP/1.1, which a gRPC client only sees as a protocol or TLS error) where its
//! client port was meant, with the leader's client address when that port's `/status`
//! tells it. Each look is bounded in time and changes nothing on the node.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio_rustls::rustls;

/// How long one address may take to be looked at.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How much of an HTTP answer is read.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// Whether an error may come from the URL naming the wrong port or a node that is down,
/// rather than from an answer of the cluster.
pub fn worth_a_look(e: &tenure::Error) -> bool {
    use tenure::Error as E;
    matches!(
        e,
        E::Unavailable(_) | E::Indeterminate(_) | E::Tls(_) | E::Backend(_)
    )
}

/// One hint per address of a `tenure://` URL that is not a client port (none for other
/// URLs, for addresses that look right, and for what cannot be told apart).
pub async fn hints(url: &str) -> Vec<String> {
    let Some(rest) = url.strip_prefix("tenure://") else {
        return Vec::new();
    };
    let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
    let tls = match tls_config(query) {
        Ok(t) => t,
        // The files were read once already to build the client; an error here only means
        // that no look over TLS is possible.
        Err(_) => return Vec::new(),
    };
    // All addresses at once, so that the whole look takes one timeout at most.
    let mut looks = tokio::task::JoinSet::new();
    for (i, addr) in hosts
        .trim_end_matches('/')
        .split(',')
        .filter(|a| !a.is_empty())
        .enumerate()
    {
        let (addr, tls) = (addr.to_string(), tls.clone());
        looks.spawn(async move {
            let hint = tokio::time::timeout(PROBE_TIMEOUT, look(&addr, tls))
                .await
                .ok()
                .flatten();
            (i, hint)
        });
    }
    let mut found: Vec<(usize, String)> = Vec::new();
    while let Some(done) = looks.join_next().await {
        if let Ok((i, Some(hint))) = done {
            found.push((i, hint));
        }
    }
    // In the URL's order.
    found.sort();
    found.into_iter().map(|(_, hint)| hint).collect()
}

/// A rustls client configuration from the URL's `ca`, `cert` and `key` (None without
/// `ca`: plaintext). It offers HTTP/1.1 only, as a browser would.
fn tls_config(query: &str) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
    };
    let Some(ca) = param("ca") else {
        return Ok(None);
    };
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_file_iter(ca).map_err(|e| e.to_string())? {
        roots
            .add(der.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match (param("cert"), param("key")) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| e.to_string())?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(std::sync::Arc::new(config)))
}

/// What is wrong with `addr` as a client port, if anything can be told.
async fn look(addr: &str, tls: Option<std::sync::Arc<rustls::ClientConfig>>) -> Option<String> {
    let tcp = match tokio::net::TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Some(format!(
                "nothing listens on {addr} (connection refused): is the node running, and is \
                 this its client port (the CLIENT of `--node ID=PEER,CLIENT,HTTP`)?"
            ))
        }
        Err(e) => return Some(format!("cannot connect to {addr}: {e}")),
    };
    let answer = match tls {
        None => http_status(tcp, addr).await?,
        Some(config) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .ok()?;
            http_status(stream, addr).await?
        }
    };
    let mut hint = format!(
        "{addr} answers HTTP/1.1: that looks like the node's HTTP port, not its client \
         port; the client (gRPC) port is the CLIENT address of `--node ID=PEER,CLIENT,HTTP`"
    );
    if let Some(leader) = answer {
        hint.push_str(&format!(
            "; the cluster's leader serves clients on {leader} (try --backend tenure://{leader})"
        ));
    }
    Some(hint)
}

/// `GET /status` over `stream`: None if the peer does not speak HTTP/1; else the leader's
/// client address from the answer, when it holds one.
async fn http_status<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    addr: &str,
) -> Option<Option<String>> {
    let request =
        format!("GET /status HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    stream.flush().await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.len() < ANSWER_BYTES_MAX {
        match stream.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // A TLS peer may close without close_notify after the whole answer.
            Err(_) => break,
        }
    }
    if !buf.starts_with(b"HTTP/1.") {
        return None;
    }
    let text = String::from_utf8_lossy(&buf);
    let leader = text
        .split_once("\r\n\r\n")
        .filter(|(head, _)| head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"))
        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(body).ok())
        .and_then(|v| v.get("leader_addr")?.as_str().map(str::to_string))
        .filter(|a| !a.is_empty());
    Some(leader)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    /// A one-connection HTTP/1.1 server that answers `/status` as a node's HTTP port does.
    fn fake_http_port(body: &'static str) -> std::net::SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("an address");
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        });
        addr
    }

    #[tokio::test]
    async fn an_http_port_is_named_with_the_leaders_client_address() {
        let addr = fake_http_port(r#"{"id":1,"role":"leader","leader_addr":"127.0.0.1:8001"}"#);
        let hints = hints(&format!("tenure://{addr}")).await;
        assert_eq!(hints.len(), 1, "{hints:?}");
        assert!(
            hints[0].contains(&format!("{addr} answers HTTP/1.1"))
                && hints[0].contains("HTTP port")
                && hints[0].contains("the cluster's leader serves clients on 127.0.0.1:8001"),
            "{hints:?}"
        );
    }

    #[tokio::test]
    async fn a_closed_port_is_named() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("an address");
        // Dropped: nothing listens there now.
        let hints = hints(&format!("tenure://{addr}/")).await;
        assert_eq!(hints.len(), 1, "{hints:?}");
        assert!(
            hints[0].contains(&format!("nothing listens on {addr}")),
            "{hints:?}"
        );
    }

    #[tokio::test]
    async fn a_port_that_does_not_speak_http_gets_no_hint() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("an address");
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            // What an HTTP/2-only server sends first: its SETTINGS frame.
            let _ = s.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        });
        assert!(hints(&format!("tenure://{addr}")).await.is_empty());
        assert!(hints("etcd://127.0.0.1:1").await.is_empty());
    }
}
