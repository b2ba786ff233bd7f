//! `tenure::embedded`: replicas of an application that elect among themselves, each with a
//! tenure node in its own process (here: in this test's process, one runtime per replica),
//! on one port per node. The contract suite (`contract.rs`, `embedded::`) checks the
//! election API over embedded nodes; this file checks what is particular to them.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure::{CampaignOptions, Client, Error};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[path = "common/replicas.rs"]
mod replicas;
use replicas::{raft_ready, Replicas};

fn opts(ttl_ms: u64) -> CampaignOptions {
    CampaignOptions {
        ttl: Duration::from_millis(ttl_ms),
        ..Default::default()
    }
}

/// Three replicas campaign, each through its own node; one leads; when its node stops,
/// another replica leads with a higher token, and a stale token's fenced write is refused.
#[test]
fn replicas_elect_among_themselves_and_replace_a_stopped_leader() {
    let mut replicas = Replicas::start(3, true);
    let mut clients = BTreeMap::new();
    for id in 1..=3 {
        let client = replicas
            .rt(id)
            .block_on(replicas.node(id).client())
            .expect("a client");
        clients.insert(id, client);
    }
    replicas.rt(1).block_on(raft_ready(&clients[&1]));
    let (tx, mut won) = tokio::sync::mpsc::unbounded_channel();
    let mut campaigns = Vec::new();
    for (&id, client) in &clients {
        let (client, tx) = (client.clone(), tx.clone());
        campaigns.push(replicas.rt(id).spawn(async move {
            let l = client
                .campaign(
                    "nightly-close",
                    format!("replica-{id}").as_bytes(),
                    opts(1000),
                )
                .await
                .expect("campaign");
            let _ = tx.send((id, l.token()));
            let lost = l.lost().await;
            eprintln!("replica {id} lost leadership: {lost}");
        }));
    }
    let rt = tokio::runtime::Runtime::new().expect("the test's runtime");
    let (first, first_token) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), won.recv()).await })
        .expect("someone leads within 10 s")
        .expect("a winner");
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(300)).await });
    assert!(won.try_recv().is_err(), "two replicas lead at once");
    let written = replicas
        .rt(first)
        .block_on(clients[&first].fenced_put("close/day", b"1", "nightly-close", first_token))
        .expect("the leader writes");
    assert!(written > 0);

    // The leader's process ends: its node, its client and its campaign with it (no revoke
    // is sent: the session ends by expiry).
    clients.remove(&first);
    replicas.stop(first);
    let (second, second_token) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(15), won.recv()).await })
        .expect("another replica leads within 15 s")
        .expect("a winner");
    assert_ne!(second, first);
    assert!(
        second_token > first_token,
        "{second_token} after {first_token}"
    );
    let refused = replicas.rt(second).block_on(clients[&second].fenced_put(
        "close/day",
        b"stale",
        "nightly-close",
        first_token,
    ));
    assert!(
        matches!(refused, Err(Error::StaleToken { current, .. }) if current == second_token),
        "{refused:?}"
    );
    replicas
        .rt(second)
        .block_on(clients[&second].fenced_put("close/day", b"2", "nightly-close", second_token))
        .expect("the new leader writes");
    for c in campaigns {
        c.abort();
    }
}

/// One port serves all three protocols: the replicas reach each other on it (they elect),
/// the client API answers on it, and so does HTTP; the member list sends clients to it. Plaintext on loopback here (the first bytes tell the protocols apart), TLS
/// in the other test.
#[test]
fn one_port_serves_peers_clients_and_http() {
    let replicas = Replicas::start(3, false);
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let client = rt.block_on(replicas.node(3).client()).expect("a client");
    rt.block_on(raft_ready(&client));
    let l = rt
        .block_on(client.campaign("one-port", b"x", opts(1000)))
        .expect("campaign through node 3, whichever node leads");
    assert!(l.token() > 0);
    let addr = replicas.addrs[&3].to_string();
    let health = rt.block_on(async {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.expect("read");
        answer
    });
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let channel = client.channel().expect("a tenure channel");
    let members = rt
        .block_on(channel.call(|c| async move {
            tenure::proto::v1::cluster_client::ClusterClient::new(c)
                .members(tenure::proto::v1::MembersRequest {})
                .await
        }))
        .expect("the member list")
        .members;
    assert_eq!(members.len(), 3, "{members:?}");
    for m in &members {
        assert_eq!(
            m.client_addr,
            replicas.addrs[&m.id].to_string(),
            "member {}'s clients are sent to its one port",
            m.id
        );
    }
    drop(l);
}

/// A URL naming no node that runs here is a typed error, and so is a malformed one.
#[test]
fn embedded_urls_name_running_nodes_only() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let missing = rt.block_on(Client::connect("embedded:nobody"));
    assert!(
        matches!(missing, Err(Error::Unavailable(ref why)) if why.contains("nobody")),
        "{missing:?}"
    );
    let empty = rt.block_on(Client::connect("embedded:"));
    assert!(matches!(empty, Err(Error::InvalidUrl { .. })), "{empty:?}");
}
