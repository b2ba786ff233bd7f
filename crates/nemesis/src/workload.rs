//! The workload: real gRPC clients (the generated `tenure.v1` clients) that hold sessions,
//! campaign, write and read fenced keys with their token, resign, revoke, and sometimes
//! freeze past their TTL and then write with their old token.
//!
//! Every request is one attempt recorded in the history; a client that gets `not-leader`
//! moves to the hinted leader for its *next* request, and one that gets no answer moves to
//! another node. Every loop stops at the run's deadline and every request has a timeout, so
//! the workload ends by itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tenure_proto::v1;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::v1::elections_client::ElectionsClient;
use tenure_proto::v1::fenced_keys_client::FencedKeysClient;
use tenure_proto::v1::sessions_client::SessionsClient;
use tenure_proto::{Reason, LEADER_ID_KEY};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::checks::drift_margin_us;
use crate::history::{classify, Kind, Micros, Outcome, Recorder, Value};

/// How long an ordinary request may take before the client gives up (indeterminate).
pub const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a campaign waits in the queue before the client stops waiting (the candidacy
/// stays queued; the next campaign call of the session picks it up).
pub const CAMPAIGN_TIMEOUT: Duration = Duration::from_secs(2);

/// A uniform draw in `lo..hi` (or `lo` when the range is empty).
pub fn range(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        lo
    } else {
        lo + rng.next_u64() % (hi - lo)
    }
}

/// Values are unique over the run, so that every read names the write it saw.
static VALUES: AtomicU64 = AtomicU64::new(0);

/// Sessions lost over the run: ended by the cluster (its keepalive or campaign answered
/// `unknown-session`) or lapsed by rule 4 (no acknowledged renewal in time) while their
/// holder still renewed them. A holder that freezes on purpose loses nothing here.
static LEASES_LOST: AtomicU64 = AtomicU64::new(0);

/// How many sessions the workload lost so far (see `LEASES_LOST`).
pub fn leases_lost() -> u64 {
    LEASES_LOST.load(Ordering::Relaxed)
}

/// The gRPC channels of every node.
#[derive(Clone)]
pub struct Nodes {
    /// By node id.
    pub channels: BTreeMap<u64, Channel>,
}

/// One client: a name in the history and the node it talks to now.
pub struct Client {
    /// Name in the history.
    pub name: String,
    /// The history.
    pub rec: Recorder,
    nodes: Nodes,
    /// The node addressed next.
    pub at: u64,
    /// Its own generator (derived from the run's seed).
    pub rng: ChaCha8Rng,
}

impl Client {
    /// A client named `name`, starting at the first node.
    pub fn new(name: &str, rec: Recorder, nodes: Nodes, seed: u64) -> Client {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ids: Vec<u64> = nodes.channels.keys().copied().collect();
        let at = ids[(rng.next_u64() % ids.len() as u64) as usize];
        Client {
            name: name.to_string(),
            rec,
            nodes,
            at,
            rng,
        }
    }

    /// Pin the client to node `id`.
    pub fn pin(&mut self, id: u64) {
        self.at = id;
    }

    fn channel(&self) -> Channel {
        self.nodes.channels[&self.at].clone()
    }

    /// Choose the node for the next request from the last outcome.
    fn route(&mut self, outcome: &Outcome, status: Option<&tonic::Status>) {
        match outcome {
            Outcome::Ok(_) => {}
            Outcome::Fail { reason, .. }
                if !matches!(reason, Reason::NotLeader | Reason::Unavailable) => {}
            _ => {
                let hint = status
                    .and_then(|s| s.metadata().get(LEADER_ID_KEY))
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|id| self.nodes.channels.contains_key(id) && *id != self.at);
                self.at = hint.unwrap_or_else(|| {
                    let ids: Vec<u64> = self.nodes.channels.keys().copied().collect();
                    let pos = ids.iter().position(|&i| i == self.at).unwrap_or(0);
                    ids[(pos + 1 + (self.rng.next_u64() as usize % (ids.len() - 1).max(1)))
                        % ids.len()]
                });
            }
        }
    }

    /// A fresh value for a write.
    pub fn value(&self) -> String {
        format!("{}:{}", self.name, VALUES.fetch_add(1, Ordering::Relaxed))
    }

    /// One attempt of a unary call at the node addressed (`call` gets its channel), at most
    /// `timeout`, recorded as `kind`; the next request goes where the outcome says. Returns
    /// the outcome and the answer if any.
    async fn call<T, Fut>(
        &mut self,
        kind: Kind,
        timeout: Duration,
        call: impl FnOnce(Channel) -> Fut,
        value: impl FnOnce(&T) -> Value,
    ) -> (Outcome, Option<T>)
    where
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let fut = call(self.channel());
        let (outcome, answer, status) = self.rec.call(&self.name, kind, timeout, fut, value).await;
        self.route(&outcome, status.as_ref());
        (outcome, answer)
    }

    /// `Grant`; the session and its TTL.
    pub async fn grant(&mut self, ttl_ms: u64) -> Option<(u64, u64)> {
        let req = v1::GrantRequest {
            ttl_ms,
            session_secret: tenure_proto::process_session_secret(),
            ..Default::default()
        };
        let grant = |ch| async move { SessionsClient::new(ch).grant(req).await };
        let session = |r: &v1::GrantResponse| Value::Session {
            session: r.session_id,
            ttl_ms: r.ttl_ms,
        };
        let (_, r) = self
            .call(Kind::Grant { ttl_ms }, OP_TIMEOUT, grant, session)
            .await;
        r.map(|r| (r.session_id, r.ttl_ms))
    }

    /// `Revoke`.
    pub async fn revoke(&mut self, session: u64) -> Outcome {
        let req = v1::RevokeRequest {
            session_id: session,
            session_secret: tenure_proto::process_session_secret(),
            ..Default::default()
        };
        let revoke = |ch| async move { SessionsClient::new(ch).revoke(req).await };
        let kind = Kind::Revoke { session };
        self.call(kind, OP_TIMEOUT, revoke, |_| Value::Unit).await.0
    }

    /// `Campaign`: the token once leading.
    pub async fn campaign(
        &mut self,
        election: &str,
        session: u64,
        timeout: Duration,
    ) -> (Outcome, Option<u64>) {
        let kind = Kind::Campaign {
            election: election.to_string(),
            session,
        };
        let req = v1::CampaignRequest {
            election: election.to_string(),
            session_id: session,
            value: self.name.as_bytes().to_vec(),
            session_secret: tenure_proto::process_session_secret(),
            ..Default::default()
        };
        let campaign = |ch| async move { ElectionsClient::new(ch).campaign(req).await };
        let token = |r: &v1::CampaignResponse| Value::Token(r.token);
        let (o, r) = self.call(kind, timeout, campaign, token).await;
        (o, r.map(|r| r.token))
    }

    /// `Resign`.
    pub async fn resign(&mut self, election: &str, session: u64) -> Outcome {
        let req = v1::ResignRequest {
            election: election.to_string(),
            session_id: session,
            session_secret: tenure_proto::process_session_secret(),
            ..Default::default()
        };
        let resign = |ch| async move { ElectionsClient::new(ch).resign(req).await };
        let kind = Kind::Resign {
            election: election.to_string(),
            session,
        };
        self.call(kind, OP_TIMEOUT, resign, |_| Value::Unit).await.0
    }

    /// `Leader`.
    pub async fn leader(&mut self, election: &str) -> Outcome {
        let req = v1::LeaderRequest {
            election: election.to_string(),
        };
        let leader = |ch| async move { ElectionsClient::new(ch).leader(req).await };
        let kind = Kind::Leader {
            election: election.to_string(),
        };
        let seen = |r: &v1::LeaderResponse| {
            Value::Leader(r.leader.as_ref().map(|l| (l.session_id, l.token)))
        };
        self.call(kind, OP_TIMEOUT, leader, seen).await.0
    }

    /// A fenced `Put` of a fresh value.
    pub async fn put(
        &mut self,
        key: &str,
        election: &str,
        token: u64,
        timeout: Duration,
    ) -> Outcome {
        let value = self.value();
        let req = v1::PutRequest {
            key: key.to_string(),
            value: value.as_bytes().to_vec(),
            election: election.to_string(),
            token,
            ..Default::default()
        };
        let kind = Kind::Put {
            key: key.to_string(),
            value,
            election: election.to_string(),
            token,
        };
        let put = |ch| async move { FencedKeysClient::new(ch).put(req).await };
        let index = |r: &v1::PutResponse| Value::Index(r.index);
        self.call(kind, timeout, put, index).await.0
    }

    /// `Get`.
    pub async fn get(&mut self, key: &str) -> Outcome {
        let req = v1::GetRequest {
            key: key.to_string(),
        };
        let get = |ch| async move { FencedKeysClient::new(ch).get(req).await };
        let read = |r: &v1::GetResponse| {
            Value::Read(r.value.as_ref().map(|v| {
                (
                    String::from_utf8_lossy(&v.value).into_owned(),
                    v.token,
                    v.index,
                )
            }))
        };
        let kind = Kind::Get {
            key: key.to_string(),
        };
        self.call(kind, OP_TIMEOUT, get, read).await.0
    }

    /// `TransferLeadership` at the node addressed.
    pub async fn transfer_leadership(&mut self, to: u64) -> Outcome {
        let req = v1::TransferLeadershipRequest { to };
        let transfer = |ch| async move { ClusterClient::new(ch).transfer_leadership(req).await };
        let kind = Kind::TransferLeadership { to };
        self.call(kind, OP_TIMEOUT, transfer, |_| Value::Unit)
            .await
            .0
    }

    /// `AddMember` at the node addressed.
    pub async fn add_member(&mut self, id: u64, voter: bool) -> Outcome {
        let req = v1::MemberRequest {
            id,
            voter,
            ..Default::default()
        };
        let add = |ch| async move { ClusterClient::new(ch).add_member(req).await };
        let kind = Kind::AddMember { id, voter };
        self.call(kind, OP_TIMEOUT, add, |_| Value::Unit).await.0
    }

    /// `RemoveMember` at the node addressed.
    pub async fn remove_member(&mut self, id: u64) -> Outcome {
        let req = v1::MemberRequest {
            id,
            voter: false,
            ..Default::default()
        };
        let remove = |ch| async move { ClusterClient::new(ch).remove_member(req).await };
        let kind = Kind::RemoveMember { id };
        self.call(kind, OP_TIMEOUT, remove, |_| Value::Unit).await.0
    }
}

/// A session kept alive in the background; its validity by DESIGN rule 4.
pub struct KeptSession {
    /// Session id.
    pub session: u64,
    /// TTL.
    pub ttl_ms: u64,
    /// Send time of the last acknowledged keepalive (or of the grant) + TTL − margin.
    pub valid_until: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Set when the session ended or lapsed while it was still being renewed.
    lost: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl KeptSession {
    /// Whether the holder may still count on its session now.
    pub fn valid(&self, now: Micros) -> bool {
        now < self.valid_until.load(Ordering::Relaxed)
    }

    /// Stop renewing at once (the holder freezes).
    pub fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Records that the session lapsed while it was renewed (unless the holder had stopped
    /// renewing it on purpose).
    pub fn lapsed(&self) {
        if !self.stop.load(Ordering::Relaxed) {
            self.lost.store(true, Ordering::Relaxed);
        }
    }

    /// Stop renewing (the holder freezes or lets go) and wait for the renewer to finish;
    /// counts the session in [`leases_lost`] if it was lost.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        if self.lost.load(Ordering::Relaxed) {
            LEASES_LOST.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Start renewing `session` of `client` (granted at `granted_at`) on its own keepalive
/// stream, starting at the client's node, one request every TTL/4, each recorded as one
/// operation.
pub fn keep_alive(
    client: &Client,
    session: u64,
    ttl_ms: u64,
    granted_at: Micros,
    deadline: Micros,
) -> KeptSession {
    let valid_until = Arc::new(AtomicU64::new(
        (granted_at + ttl_ms * 1_000).saturating_sub(drift_margin_us(ttl_ms)),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let lost = Arc::new(AtomicBool::new(false));
    let name = format!("{}-ka", client.name);
    let task = tokio::spawn(renew(
        name,
        client.rec.clone(),
        client.nodes.clone(),
        client.at,
        session,
        ttl_ms,
        valid_until.clone(),
        stop.clone(),
        lost.clone(),
        deadline,
    ));
    KeptSession {
        session,
        ttl_ms,
        valid_until,
        stop,
        lost,
        task,
    }
}

#[allow(clippy::too_many_arguments)]
async fn renew(
    name: String,
    rec: Recorder,
    nodes: Nodes,
    mut at: u64,
    session: u64,
    ttl_ms: u64,
    valid_until: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
    deadline: Micros,
) {
    let lose = || {
        if !stop.load(Ordering::Relaxed) {
            lost.store(true, Ordering::Relaxed);
        }
    };
    let clock = rec.clock();
    let every = Duration::from_millis((ttl_ms / 4).max(20));
    let ids: Vec<u64> = nodes.channels.keys().copied().collect();
    let mut seq = 0u64;
    let next_node = |at: u64| {
        let pos = ids.iter().position(|&i| i == at).unwrap_or(0);
        ids[(pos + 1) % ids.len()]
    };
    'streams: while !stop.load(Ordering::Relaxed) && clock.now() < deadline {
        let (tx, rx) = mpsc::channel::<v1::KeepAliveRequest>(16);
        let mut c = SessionsClient::new(nodes.channels[&at].clone());
        // Send the first request before opening, so that the server answers at once.
        seq += 1;
        let mut pending: BTreeMap<u64, Micros> = BTreeMap::new();
        pending.insert(seq, clock.now());
        let _ = tx
            .send(v1::KeepAliveRequest {
                session_id: session,
                seq,
                session_secret: tenure_proto::process_session_secret(),
                bind: false,
            })
            .await;
        let opened = tokio::time::timeout(OP_TIMEOUT, c.keep_alive(ReceiverStream::new(rx))).await;
        let mut stream = match opened {
            Ok(Ok(r)) => r.into_inner(),
            other => {
                let outcome = match other {
                    Ok(Err(status)) => classify(&status),
                    _ => Outcome::Indeterminate {
                        why: "keepalive stream did not open".into(),
                    },
                };
                for (_, invoke) in std::mem::take(&mut pending) {
                    rec.record(&name, Kind::KeepAlive { session }, invoke, outcome.clone());
                }
                if outcome.is_fail(Reason::UnknownSession) {
                    lose();
                    return;
                }
                at = next_node(at);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'streams;
            }
        };
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            if stop.load(Ordering::Relaxed) || clock.now() >= deadline {
                break 'streams;
            }
            tokio::select! {
                _ = tick.tick() => {
                    // A stream whose oldest request waits too long is stuck (its node is
                    // frozen or cut off): give up on it and open one elsewhere.
                    let now = clock.now();
                    if pending.values().next().is_some_and(|&t| now - t > OP_TIMEOUT.as_micros() as u64) {
                        for (_, invoke) in std::mem::take(&mut pending) {
                            rec.record(&name, Kind::KeepAlive { session }, invoke, Outcome::Indeterminate { why: "no answer on the stream".into() });
                        }
                        at = next_node(at);
                        continue 'streams;
                    }
                    seq += 1;
                    pending.insert(seq, now);
                    let request = v1::KeepAliveRequest { session_id: session, seq, session_secret: tenure_proto::process_session_secret(), bind: false };
                    if tx.send(request).await.is_err() {
                        continue 'streams;
                    }
                }
                msg = stream.message() => match msg {
                    Ok(Some(r)) => {
                        if let Some(invoke) = pending.remove(&r.seq) {
                            rec.record(&name, Kind::KeepAlive { session }, invoke, Outcome::Ok(Value::Renewed { ttl_ms: r.ttl_ms }));
                            let until = (invoke + r.ttl_ms * 1_000).saturating_sub(drift_margin_us(r.ttl_ms));
                            valid_until.fetch_max(until, Ordering::Relaxed);
                        }
                    }
                    Ok(None) | Err(_) => {
                        let (outcome, hint) = match &msg {
                            Err(status) => (classify(status), status.metadata().get(LEADER_ID_KEY).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())),
                            _ => (Outcome::Indeterminate { why: "keepalive stream ended".into() }, None),
                        };
                        // The error answers one request, but the stream does not say which:
                        // the ones still waiting are indeterminate (only acknowledgements
                        // count for the holder anyway).
                        let gone = outcome.is_fail(Reason::UnknownSession);
                        for (_, invoke) in std::mem::take(&mut pending) {
                            let o = if gone { outcome.clone() } else { Outcome::Indeterminate { why: format!("stream failed: {}", outcome.name()) } };
                            rec.record(&name, Kind::KeepAlive { session }, invoke, o);
                        }
                        if gone {
                            lose();
                            return;
                        }
                        at = hint.filter(|h| nodes.channels.contains_key(h)).unwrap_or_else(|| next_node(at));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue 'streams;
                    }
                },
            }
        }
    }
}

/// The range of session TTLs candidates ask for (ms): short, so that faults reach the lease
/// edges.
pub const TTL_MS: (u64, u64) = (600, 1_500);
/// The range under `--hostile`: a few seconds, as services use.
pub const HOSTILE_TTL_MS: (u64, u64) = (2_000, 5_000);

/// What one candidate client does until the deadline: hold sessions of a TTL in `ttl_ms`,
/// campaign, write while leading, and let go in one of several ways.
pub async fn candidate(
    mut c: Client,
    election: String,
    key: String,
    deadline: Micros,
    ttl_ms: (u64, u64),
) {
    let clock = c.rec.clock();
    let (ttl_lo, ttl_hi) = ttl_ms;
    while clock.now() < deadline {
        let ttl_ms = range(&mut c.rng, ttl_lo, ttl_hi);
        let granted_at = clock.now();
        let Some((session, ttl_ms)) = c.grant(ttl_ms).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let kept = keep_alive(&c, session, ttl_ms, granted_at, deadline);
        let mut end_with_revoke = true;
        while clock.now() < deadline && kept.valid(clock.now()) {
            let (o, token) = c.campaign(&election, session, CAMPAIGN_TIMEOUT).await;
            let Some(token) = token else {
                if o.is_fail(Reason::UnknownSession) {
                    kept.lapsed();
                    end_with_revoke = false;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(range(&mut c.rng, 20, 100))).await;
                continue;
            };
            // Leading: write and read while the session is valid by rule 4.
            for _ in 0..range(&mut c.rng, 2, 8) {
                if !kept.valid(clock.now() + 50_000) || clock.now() >= deadline {
                    break;
                }
                c.put(&key, &election, token, OP_TIMEOUT).await;
                if c.rng.next_u64().is_multiple_of(2) {
                    c.get(&key).await;
                }
                tokio::time::sleep(Duration::from_millis(range(&mut c.rng, 20, 120))).await;
            }
            match c.rng.next_u64() % 100 {
                0..=39 => {
                    c.resign(&election, session).await;
                    tokio::time::sleep(Duration::from_millis(range(&mut c.rng, 50, 300))).await;
                }
                40..=59 => {
                    // Freeze past the TTL (no keepalives, no requests), then wake up and
                    // write with the old token, as a paused process would.
                    let ttl = kept.ttl_ms;
                    kept.halt();
                    let pause = 2 * ttl + range(&mut c.rng, 100, 500);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    if clock.now() < deadline {
                        c.put(&key, &election, token, OP_TIMEOUT).await;
                    }
                    // The session has expired (or will); start over with a new one.
                    c.revoke(session).await;
                    end_with_revoke = false;
                    break;
                }
                60..=74 => break,
                _ => {}
            }
        }
        if clock.now() < deadline && !kept.valid(clock.now()) {
            kept.lapsed();
        }
        kept.stop().await;
        if end_with_revoke {
            c.revoke(session).await;
        }
    }
}

/// A reader: who leads the election, and what the key holds, until the deadline.
pub async fn reader(mut c: Client, election: String, key: String, deadline: Micros) {
    let clock = c.rec.clock();
    while clock.now() < deadline {
        c.leader(&election).await;
        c.get(&key).await;
        tokio::time::sleep(Duration::from_millis(range(&mut c.rng, 50, 200))).await;
    }
}
