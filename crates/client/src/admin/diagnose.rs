//! Why a `tenure://` backend did not answer, in words a person can act on.
//!
//! When a request to the cluster fails for want of an answer (unavailable, outcome unknown,
//! TLS, a protocol error), a program (the CLI's script commands, `tenure run`) looks at each address of the
//! URL once more and say what they find: nothing listening there, or a node's HTTP port
//! (it answers HTTP/1.1, which a gRPC client only sees as a protocol or TLS error) where its
//! client port was meant, with the leader's client address when that port's `/status`
//! tells it. Each look is bounded in time and changes nothing on the node.

use std::time::Duration;

use super::http::{HttpError, NodeHttp};

/// How long one address may take to be looked at.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether an error may come from the URL naming the wrong port or a node that is down,
/// rather than from an answer of the cluster.
pub fn worth_a_look(e: &crate::Error) -> bool {
    use crate::Error as E;
    matches!(
        e,
        E::Unavailable(_) | E::Indeterminate(_) | E::Tls(_) | E::Backend(_)
    )
}

/// One hint per address of a `tenure://` URL that is not a client port (none for other
/// URLs, for addresses that look right, and for what cannot be told apart).
pub async fn hints(url: &str) -> Vec<String> {
    let Ok(crate::url::Target::Cluster(cluster)) = crate::url::Target::parse(url) else {
        return Vec::new();
    };
    let plaintext = cluster.ca.is_none();
    // All addresses at once, so that the whole look takes one timeout at most.
    let mut looks = tokio::task::JoinSet::new();
    for (i, addr) in cluster.addrs.into_iter().enumerate() {
        // The files were read once already to build the client; an error here only means
        // that no look is possible.
        let Ok(node) = NodeHttp::from_cluster_url(url, &addr) else {
            return Vec::new();
        };
        looks.spawn(async move {
            let hint = tokio::time::timeout(PROBE_TIMEOUT, look(&addr, &node, plaintext))
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

/// What is wrong with `addr` as a client port, if anything can be told: `GET /status`
/// there, as a node's HTTP port would answer it.
async fn look(addr: &str, node: &NodeHttp, plaintext: bool) -> Option<String> {
    let (code, body) = match node.fetch("/status").await {
        Ok(answer) => answer,
        Err(e) if e.is_refused() => {
            return Some(format!(
                "nothing listens on {addr} (connection refused): is the node running, and is \
                 this its client port (the CLIENT of `--node ID=PEER,CLIENT,HTTP`)?"
            ))
        }
        Err(e @ HttpError::Connect { .. }) => return Some(e.to_string()),
        // The peer broke off: a client port that speaks TLS does, when asked in plaintext.
        Err(HttpError::Exchange(_)) if plaintext && crate::tls::speaks_tls(addr).await => {
            return Some(crate::tls::plaintext_to_tls(addr))
        }
        // TLS failed, the peer broke off, or it does not speak HTTP/1.x: nothing to tell.
        Err(HttpError::Exchange(_)) => return None,
    };
    let leader = Some(body)
        .filter(|_| code == 200)
        .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
        .and_then(|v| v.get("leader_addr")?.as_str().map(str::to_string))
        .filter(|a| !a.is_empty());
    let mut hint = format!(
        "{addr} answers HTTP/1.1: that looks like the node's HTTP port, not its client \
         port; the client (gRPC) port is the CLIENT address of `--node ID=PEER,CLIENT,HTTP`"
    );
    if let Some(leader) = leader {
        hint.push_str(&format!(
            "; the cluster's leader serves clients on {leader} (try --backend tenure://{leader})"
        ));
    }
    Some(hint)
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
