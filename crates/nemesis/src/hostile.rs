//! Hostile load (`--hostile`, with `--tls`): what anyone on the network can do to a secured
//! cluster, run against every node for the whole run while the workload holds leases, renews,
//! observes and writes.
//!
//! - **Anonymous connections**: from eight loopback addresses per node, TLS connections
//!   without a client certificate that finish the handshake and the HTTP/2 preface and then
//!   wait (answering pings); each one the node closes is opened again at once.
//! - **Anonymous bodies**: on those connections, calls that announce a 4 MB message, send
//!   1 MB of it and never finish.
//! - **Slow headers**: HTTP requests on each node's HTTP port whose headers arrive a byte a
//!   second; each one the node cuts off is started again.
//! - **A greedy tenant**: an authenticated principal of its own (`client-greedy`) that takes
//!   all its grants allow, up to a bound that keeps the run short: sessions until its quota
//!   refuses them (or `GREEDY_SESSIONS`), KeepAlive and Observe streams on every node until
//!   its share refuses them, elections and 1 KiB keys until their quotas refuse them (or
//!   `GREEDY_ELECTIONS`); it keeps what it got for the rest of the run. With `--hostile` the
//!   servers run with per-principal quotas and shares below what it asks for, so it meets
//!   every one of them, while the harness's own principal stays far below.
//! - **A watcher** asks every node's `/health` four times a second and samples each
//!   server's resident memory.
//!
//! What it reports is measured, not judged here; `crates/cli/tests/nemesis.rs` holds a short
//! run to the bounds (no lease lost, at most one Raft leader change, `/health`
//! answering throughout, memory growth under 64 MiB).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

use crate::cluster::{Cluster, HttpClient};

/// Anonymous connections each attacking address keeps open against one node.
const CONNECTIONS_PER_ADDRESS: usize = 24;
/// Attacking addresses per node (from 127.0.0.10 up).
const ADDRESSES: u8 = 8;
/// Slow-header connections against one node's HTTP port.
const SLOW_HEADERS: usize = 16;
/// Most sessions the greedy tenant grants.
const GREEDY_SESSIONS: usize = 2_000;
/// Most elections (and keys) the greedy tenant creates.
const GREEDY_ELECTIONS: usize = 500;
/// Most streams of each kind the greedy tenant opens on one node (fewer than one HTTP/2
/// connection carries, so that none waits for a free stream).
const GREEDY_STREAMS: usize = 500;

/// What the attackers did and what the watcher saw.
#[derive(Debug, Default)]
pub struct Counts {
    /// Anonymous TLS connections opened (handshake and HTTP/2 preface done).
    pub connections_opened: AtomicU64,
    /// Anonymous connections refused or closed by a node.
    pub connections_closed: AtomicU64,
    /// Calls with unfinished bodies a node answered (UNAUTHENTICATED, at the headers).
    pub bodies_answered: AtomicU64,
    /// Slow-header HTTP connections a node cut off.
    pub slow_headers_cut: AtomicU64,
    /// `/health` asked, and not answered 200, over every node.
    pub health_checks: AtomicU64,
    /// Of those, the ones not answered 200 (a node that the schedule took down counts too).
    pub health_failures: AtomicU64,
    /// The first few of them, in words: the node, and its answer or why there was none.
    pub health_failed: std::sync::Mutex<Vec<String>>,
    /// `/health` answered 200, but only after [`HEALTH_SLOW`].
    pub health_slow: AtomicU64,
    /// What the greedy tenant got: sessions, KeepAlive streams, Observe streams,
    /// elections, keys.
    pub greedy_sessions: AtomicU64,
    /// KeepAlive streams the greedy tenant holds (over every node).
    pub greedy_keepalive_streams: AtomicU64,
    /// Observe streams the greedy tenant holds (over every node).
    pub greedy_observe_streams: AtomicU64,
    /// Elections the greedy tenant created.
    pub greedy_elections: AtomicU64,
    /// Keys the greedy tenant wrote.
    pub greedy_keys: AtomicU64,
    /// The greedy tenant's requests refused `quota-exceeded` (its share or quota).
    pub greedy_refused: AtomicU64,
}

/// The running attack.
pub struct Hostile {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    /// The greedy tenant, which revokes its sessions when stopped (waited for, not aborted,
    /// so that the cluster can settle after the run).
    greedy: JoinHandle<()>,
    counts: Arc<Counts>,
    /// Resident memory by node: at the start, and the most seen since (KiB).
    memory: Arc<std::sync::Mutex<BTreeMap<u64, (u64, u64)>>>,
}

use tenure_procs::flood::{anonymous_connector, open_from as open_tls};

impl Hostile {
    /// Start attacking every node of `cluster` (which must run with TLS).
    pub fn start(cluster: &Cluster) -> anyhow::Result<Hostile> {
        let certs = cluster.dir().join("certs");
        let ca = certs.join(tenure_transport::certs::files::CA);
        let h2_tls = anonymous_connector(&ca, b"h2")?;
        let http_tls = anonymous_connector(&ca, b"http/1.1")?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let memory = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let mut tasks = Vec::new();
        for (&id, addrs) in cluster.addrs() {
            for a in 0..ADDRESSES {
                let octet = 10 + a + ADDRESSES * (id as u8);
                for n in 0..CONNECTIONS_PER_ADDRESS {
                    // One connection in eight also sends unfinished bodies.
                    let bodies = n % 8 == 0;
                    tasks.push(tokio::spawn(hold_anonymous(
                        h2_tls.clone(),
                        octet,
                        addrs.client,
                        bodies,
                        Arc::clone(&stop),
                        Arc::clone(&counts),
                    )));
                }
            }
            for n in 0..SLOW_HEADERS {
                tasks.push(tokio::spawn(slow_headers(
                    http_tls.clone(),
                    100 + (id as u8) * 10 + (n % 4) as u8,
                    addrs.http,
                    Arc::clone(&stop),
                    Arc::clone(&counts),
                )));
            }
        }
        let greedy = tokio::spawn(greedy(
            greedy_channels(cluster, &certs)?,
            Arc::clone(&stop),
            Arc::clone(&counts),
        ));
        tasks.push(tokio::spawn(watch(
            cluster.http_client(),
            cluster
                .addrs()
                .iter()
                .map(|(&id, a)| (id, a.http))
                .collect(),
            cluster.pids(),
            Arc::clone(&stop),
            Arc::clone(&counts),
            Arc::clone(&memory),
        )));
        Ok(Hostile {
            stop,
            tasks,
            greedy,
            counts,
            memory,
        })
    }

    /// Stop every attacker; what they did.
    pub async fn stop(self) -> (Arc<Counts>, BTreeMap<u64, (u64, u64)>) {
        self.stop.store(true, Relaxed);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
        let greedy = self.greedy.abort_handle();
        if tokio::time::timeout(Duration::from_secs(30), self.greedy)
            .await
            .is_err()
        {
            greedy.abort();
        }
        let memory = self.memory.lock().expect("no panics").clone();
        (self.counts, memory)
    }
}

/// A channel to each node as the greedy tenant.
fn greedy_channels(
    cluster: &Cluster,
    certs: &Path,
) -> anyhow::Result<Vec<tonic::transport::Channel>> {
    use tenure_transport::certs::files;
    let read = |name: &str| std::fs::read(certs.join(name)).with_context(|| format!("read {name}"));
    let who = crate::cluster::GREEDY_CLIENT;
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read(files::CA)?))
        .identity(tonic::transport::Identity::from_pem(
            read(&files::client(who))?,
            read(&files::client_key(who))?,
        ));
    cluster
        .addrs()
        .values()
        .map(|a| {
            Ok(
                tonic::transport::Endpoint::from_shared(format!("https://{}", a.client))?
                    .connect_timeout(Duration::from_millis(300))
                    .tls_config(tls.clone())?
                    .connect_lazy(),
            )
        })
        .collect()
}

/// The greedy tenant (module docs): takes what it may, and holds it until stopped.
async fn greedy(
    channels: Vec<tonic::transport::Channel>,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) {
    use tenure_proto::v1;
    use tenure_proto::v1::elections_client::ElectionsClient;
    use tenure_proto::v1::fenced_keys_client::FencedKeysClient;
    use tenure_proto::v1::sessions_client::SessionsClient;
    // A refusal for its rate (`requests_per_second`) is waited out; one for what it holds
    // ends that kind of taking.
    let quota_refused = |s: &tonic::Status| {
        let refused = tenure_proto::Reason::of(s) == Some(tenure_proto::Reason::QuotaExceeded);
        if refused {
            counts.greedy_refused.fetch_add(1, Relaxed);
        }
        refused && !s.message().contains("calls per second")
    };
    // Requests go to whichever node leads; a not-leader answer names it, so try each.
    let on_any = |i: usize| channels[i % channels.len()].clone();
    let mut held = Vec::new();
    // Sessions, with a long TTL: kept alive on streams below.
    let mut sessions = Vec::new();
    let mut node = 0;
    while sessions.len() < GREEDY_SESSIONS && !stop.load(Relaxed) {
        let granted = SessionsClient::new(on_any(node))
            .grant(v1::GrantRequest {
                ttl_ms: 60_000,
                ..Default::default()
            })
            .await;
        match granted {
            Ok(r) => {
                let r = r.into_inner();
                sessions.push((r.session_id, r.session_secret));
                counts.greedy_sessions.fetch_add(1, Relaxed);
            }
            Err(s) if quota_refused(&s) => break,
            Err(_) => {
                node += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    // Elections and keys: one session campaigns in many, and writes a key in each.
    let Some((session, secret)) = sessions.first().cloned() else {
        return;
    };
    let mut node = 0;
    let mut n = 0;
    while n < GREEDY_ELECTIONS && !stop.load(Relaxed) {
        let election = format!("greedy-{n}");
        let campaigned = ElectionsClient::new(on_any(node))
            .campaign(v1::CampaignRequest {
                election: election.clone(),
                session_id: session,
                session_secret: secret.clone(),
                ..Default::default()
            })
            .await;
        let token = match campaigned {
            Ok(r) => r.into_inner().token,
            Err(s) if quota_refused(&s) => break,
            Err(_) => {
                node += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        counts.greedy_elections.fetch_add(1, Relaxed);
        let put = FencedKeysClient::new(on_any(node))
            .put(v1::PutRequest {
                key: format!("greedy-{n}/data"),
                value: vec![7; 1024],
                election,
                token,
                ..Default::default()
            })
            .await;
        match put {
            Ok(_) => {
                counts.greedy_keys.fetch_add(1, Relaxed);
            }
            Err(s) if quota_refused(&s) => {}
            Err(_) => {}
        }
        n += 1;
    }
    let created = n;
    // Streams on every node, until its share (or the pool) refuses them: each KeepAlive
    // stream renews one of its sessions now and then; each Observe stream watches one name.
    for ch in &channels {
        for n in 0..GREEDY_STREAMS {
            if stop.load(Relaxed) {
                break;
            }
            let (tx, rx) = tokio::sync::mpsc::channel::<v1::KeepAliveRequest>(1);
            if let Some((id, secret)) = sessions.get(n % sessions.len().max(1)) {
                let _ = tx.try_send(v1::KeepAliveRequest {
                    session_id: *id,
                    seq: 1,
                    session_secret: secret.clone(),
                    bind: false,
                });
            }
            let opened = tokio::time::timeout(
                Duration::from_secs(2),
                SessionsClient::new(ch.clone())
                    .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)),
            )
            .await;
            let Ok(opened) = opened else { break };
            match opened {
                Ok(stream) => {
                    counts.greedy_keepalive_streams.fetch_add(1, Relaxed);
                    held.push(Box::new((tx, stream)) as Box<dyn Send>);
                }
                Err(s) if quota_refused(&s) => break,
                Err(s) if s.message().contains("calls per second") => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => break,
            }
        }
        for n in 0..GREEDY_STREAMS {
            if stop.load(Relaxed) {
                break;
            }
            let opened = tokio::time::timeout(
                Duration::from_secs(2),
                ElectionsClient::new(ch.clone()).observe(v1::ObserveRequest {
                    election: format!("greedy-{}", n % created.max(1)),
                }),
            )
            .await;
            let Ok(opened) = opened else { break };
            match opened {
                Ok(stream) => {
                    counts.greedy_observe_streams.fetch_add(1, Relaxed);
                    held.push(Box::new(stream) as Box<dyn Send>);
                }
                Err(s) if quota_refused(&s) => break,
                Err(s) if s.message().contains("calls per second") => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => break,
            }
        }
    }
    // Hold everything until the run ends, then give the sessions back (the run's end
    // waits for every session to go).
    while !stop.load(Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(held);
    let mut node = 0;
    for (id, secret) in sessions {
        // At the leader (found by its not-leader answers), within the principal's rate; a
        // node that is down, restarting or without a leader yet (the last fault may still
        // be healing) is tried again, elsewhere and a moment later, for up to ten seconds.
        let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < give_up {
            let revoked = SessionsClient::new(on_any(node))
                .revoke(v1::RevokeRequest {
                    session_id: id,
                    session_secret: secret.clone(),
                    ..Default::default()
                })
                .await;
            match revoked {
                Err(s) if tenure_proto::Reason::of(&s) == Some(tenure_proto::Reason::NotLeader) => {
                    node += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(s) if s.message().contains("calls per second") => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(s) if s.code() == tonic::Code::Unavailable => {
                    node += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                _ => break,
            }
        }
    }
}

/// Keep one anonymous HTTP/2 connection open against `to`, opening it again whenever the
/// node closes it; with `bodies`, send calls that never finish on it.
async fn hold_anonymous(
    tls: tokio_rustls::TlsConnector,
    octet: u8,
    to: SocketAddr,
    bodies: bool,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) {
    while !stop.load(Relaxed) {
        let handshake = async {
            let tls = open_tls(&tls, octet, to).await?;
            tokio::time::timeout(Duration::from_secs(5), h2::client::handshake(tls))
                .await
                .ok()?
                .ok()
        };
        let Some((mut client, conn)) = handshake.await else {
            counts.connections_closed.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        counts.connections_opened.fetch_add(1, Relaxed);
        let mut conn = tokio::spawn(conn);
        let mut held = Vec::new();
        loop {
            if bodies {
                let request = http::Request::post(format!("https://{to}/tenure.v1.FencedKeys/Put"))
                    .header("content-type", "application/grpc")
                    .header("te", "trailers")
                    .body(())
                    .expect("a request");
                if let Ok((answer, mut send)) = client.send_request(request, false) {
                    let mut prefix = vec![0u8];
                    prefix.extend_from_slice(&(4u32 << 20).to_be_bytes());
                    let _ = send.send_data(prefix.into(), false);
                    let _ = send.send_data(vec![7u8; 1 << 20].into(), false);
                    let counts = Arc::clone(&counts);
                    held.push(send);
                    tokio::spawn(async move {
                        if answer.await.is_ok() {
                            counts.bodies_answered.fetch_add(1, Relaxed);
                        }
                    });
                    held.truncate(4);
                }
            }
            tokio::select! {
                _ = &mut conn => break,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            if stop.load(Relaxed) {
                conn.abort();
                return;
            }
        }
        counts.connections_closed.fetch_add(1, Relaxed);
    }
}

/// HTTP requests on `to` whose headers arrive a byte a second, one after another.
async fn slow_headers(
    tls: tokio_rustls::TlsConnector,
    octet: u8,
    to: SocketAddr,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) {
    while !stop.load(Relaxed) {
        let Some(mut stream) = open_tls(&tls, octet, to).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .await
            .is_err()
        {
            continue;
        }
        while !stop.load(Relaxed) {
            if stream.write_all(b"X").await.is_err() || stream.flush().await.is_err() {
                counts.slow_headers_cut.fetch_add(1, Relaxed);
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// How long a `/health` check waits. A debug build on two cores under the flood once took
/// 1.2 s to answer in the test suite: that is slow, and counted as such
/// ([`HEALTH_SLOW`]), but it is an answer; a node that turns clients away answers 503.
const HEALTH_TIMEOUT: Duration = Duration::from_millis(2_500);
/// A `/health` answer later than this is counted as slow.
const HEALTH_SLOW: Duration = Duration::from_secs(1);

/// `/health` of every node four times a second, and each server's resident memory.
async fn watch(
    http: HttpClient,
    nodes: Vec<(u64, SocketAddr)>,
    pids: BTreeMap<u64, u32>,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    memory: Arc<std::sync::Mutex<BTreeMap<u64, (u64, u64)>>>,
) {
    while !stop.load(Relaxed) {
        for &(id, addr) in &nodes {
            counts.health_checks.fetch_add(1, Relaxed);
            let asked = std::time::Instant::now();
            let answer = http
                .request(addr, "GET", "/health", "", HEALTH_TIMEOUT)
                .await;
            let failed = match answer {
                Ok((200, _)) => {
                    if asked.elapsed() > HEALTH_SLOW {
                        counts.health_slow.fetch_add(1, Relaxed);
                    }
                    None
                }
                Ok((code, body)) => Some(format!("HTTP {code}: {}", body.trim())),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = failed {
                counts.health_failures.fetch_add(1, Relaxed);
                let mut failed = counts.health_failed.lock().expect("no panics");
                if failed.len() < 5 {
                    failed.push(format!(
                        "node {id} after {} ms: {why}",
                        asked.elapsed().as_millis()
                    ));
                }
            }
            if let Some(kib) = pids.get(&id).and_then(|&pid| rss_kib(pid)) {
                let mut memory = memory.lock().expect("no panics");
                let entry = memory.entry(id).or_insert((kib, kib));
                entry.1 = entry.1.max(kib);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A process's resident memory in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
