//! The `etcd://` backend: etcd's election recipe over etcd's own API (DESIGN.md, "Backends").
//!
//! - A session is an etcd lease; its id is the lease id.
//! - A candidacy is the key `/tenure/elections/<election>/<lease id in hex>`, bound to the
//!   lease, with the candidate's value. The key with the lowest create revision leads; the
//!   fencing token is that key's create revision (a later leader's key was necessarily
//!   created later, so tokens strictly increase).
//! - A candidate waits by watching only its predecessor's key (the live key with the highest
//!   create revision below its own) for deletion: no herd.
//! - Keepalives are etcd `LeaseKeepAlive` on one stream; the holder's validity follows rule 4
//!   from the send time of each acknowledged keepalive. etcd TTLs are whole seconds: a TTL is
//!   rounded up, and the TTL etcd grants is the one the holder believes.
//! - Resign deletes the key (the next candidate's watch fires) and revokes the lease.
//! - `observe` reads the prefix once and then watches it from the next revision, reporting
//!   each revision at which the lowest key changes; the event index is that revision.
//! - etcd cannot tell an empty election from one that never existed, so a campaign also puts
//!   the marker key `/tenure/known/<election>` (no lease): `leader`/`observe` of an election
//!   without the marker fail with [`Error::UnknownElection`].
//!
//! Not supported: [`crate::Leadership::transfer`] (etcd's recipe has no hand-over to a named
//! candidate); it fails with [`Error::UnsupportedBackend`].
//!
//! # Security
//!
//! `etcds://[USER:PASSWORD@]HOST:PORT[,…]?ca=FILE[&cert=FILE&key=FILE]` speaks TLS (rustls
//! with *ring*): the servers' certificates must be signed by `ca` and name the host dialed;
//! `cert` and `key` add a client certificate (for etcd's `--client-cert-auth`). `USER:PASSWORD@`
//! authenticates as that etcd user (etcd's `Authenticate`, then a token on every request,
//! refreshed when it expires); on `etcd://` it works too, but the password then crosses the
//! network in the clear. The user needs readwrite on the key prefix `/tenure/`. A refused
//! password is [`Error::AuthenticationFailed`], missing permissions
//! [`Error::PermissionDenied`], a failed TLS handshake [`Error::Tls`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity, PutOptions,
    SortOrder, SortTarget, TlsOptions, Txn, TxnOp, WatchOptions,
};
use tokio::sync::mpsc;

use super::kv::{self, Leading, Record};
use super::{Backend, Capabilities, Fence};
use crate::session::Session;
use crate::url::HostsUrl;
use crate::{tls, Error, FencedValue, LeaderEvent, LeaderInfo, Result};

/// Where candidacies live.
const ELECTIONS_PREFIX: &str = "/tenure/elections/";
/// Where the markers of elections that were ever campaigned in live.
const KNOWN_PREFIX: &str = "/tenure/known/";
/// Where fenced keys live (each a [`Record`]).
const KEYS_PREFIX: &str = "/tenure/keys/";
/// TCP connect timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause before reopening a failed keepalive stream.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A connection to an etcd cluster. Cheap to clone; clones share the channel.
#[derive(Clone)]
pub(crate) struct Etcd {
    /// Boxed behind an `Arc`: the client is large, and its sub-clients are cheap clones.
    client: Arc<etcd_client::Client>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd").finish_non_exhaustive()
    }
}

/// The TLS failure behind an etcd client error, if that is what it is.
fn tls_failure(e: &etcd_client::Error) -> Option<String> {
    use etcd_client::Error as E;
    let cause: &(dyn std::error::Error + 'static) = match e {
        E::TransportError(t) => t,
        E::GRpcStatus(s) => s,
        E::IoError(io) => io,
        _ => return None,
    };
    tls::rustls_cause(cause).map(|r| format!("etcd: {r}"))
}

/// Translate an etcd client error.
fn map(e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    if let Some(why) = tls_failure(&e) {
        return Error::Tls(why);
    }
    match e {
        E::GRpcStatus(s) => {
            let msg = s.message().to_string();
            if msg.contains("lease not found") {
                Error::SessionLost
            } else if msg.contains("authentication failed") || msg.contains("invalid auth token") {
                Error::AuthenticationFailed(format!("etcd: {msg}"))
            } else if msg.contains("user name is empty") {
                Error::AuthenticationFailed(format!(
                    "etcd: {msg} (authentication is on: give USER:PASSWORD@ in the URL)"
                ))
            } else {
                match s.code() {
                    // What a connection the server closed looks like: among other causes, a
                    // TLS-only server dialed in plaintext, or one that wants a client
                    // certificate and was given none (TLS 1.3 refuses it after the client's
                    // side of the handshake is done, so no TLS error reaches us).
                    tonic::Code::Cancelled if msg == "operation was canceled" => {
                        Error::Unavailable(format!(
                            "etcd: the connection was closed ({msg}); if the server is up, \
                             check TLS: etcds:// for a TLS port, and cert= and key= where it \
                             requires a client certificate"
                        ))
                    }
                    tonic::Code::Unauthenticated => {
                        Error::AuthenticationFailed(format!("etcd: {msg}"))
                    }
                    tonic::Code::PermissionDenied => {
                        Error::PermissionDenied(format!("etcd: {msg}"))
                    }
                    tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Cancelled
                    | tonic::Code::Unknown => Error::Unavailable(format!("etcd: {msg}")),
                    tonic::Code::InvalidArgument => Error::InvalidArgument(format!("etcd: {msg}")),
                    code => Error::Backend(format!("etcd: {code:?}: {msg}")),
                }
            }
        }
        E::LeaseKeepAliveError(m) if m.contains("lease not found") => Error::SessionLost,
        E::TransportError(t) => Error::Unavailable(format!("etcd: {t}")),
        E::IoError(io) => Error::Unavailable(format!("etcd: {io}")),
        other => Error::Backend(format!("etcd: {other}")),
    }
}

fn check_election(election: &str) -> Result<()> {
    if election.is_empty() {
        return Err(Error::InvalidArgument("empty election name".into()));
    }
    if election.contains('/') {
        // One election's prefix would contain another's keys.
        return Err(Error::InvalidArgument(format!(
            "election name {election:?} contains '/', which the etcd backend does not allow"
        )));
    }
    Ok(())
}

fn prefix(election: &str) -> String {
    format!("{ELECTIONS_PREFIX}{election}/")
}

fn key(election: &str, session: u64) -> String {
    format!("{}{session:x}", prefix(election))
}

fn known(election: &str) -> String {
    format!("{KNOWN_PREFIX}{election}")
}

fn info(kv: &etcd_client::KeyValue) -> LeaderInfo {
    LeaderInfo {
        session: kv.lease() as u64,
        value: kv.value().to_vec(),
        token: kv.create_revision() as u64,
    }
}

/// A lease id as etcd takes it.
fn lease(session: u64) -> Result<i64> {
    i64::try_from(session).map_err(|_| Error::SessionLost)
}

/// The answers of a transaction of `N` gets.
fn gets<const N: usize>(r: &etcd_client::TxnResponse) -> Result<[etcd_client::GetResponse; N]> {
    let answers: Vec<etcd_client::GetResponse> = r
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            etcd_client::TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect();
    answers
        .try_into()
        .map_err(|_| Error::Backend("etcd: a read transaction answered the wrong shape".into()))
}

impl Etcd {
    /// Connect as `url` says: `rest` is what follows `etcd://` (`tls` false) or `etcds://`
    /// (`tls` true); see the module docs for the forms.
    pub async fn connect(url: &str, tls: bool, mut parsed: HostsUrl) -> Result<Etcd> {
        let bad = |why: String| Error::InvalidUrl {
            url: crate::redact_url(url),
            why,
        };
        if !parsed.path.is_empty() {
            return Err(bad("etcd URLs have no path after the hosts".into()));
        }
        let mut options = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT);
        match (&parsed.user, &parsed.password) {
            (Some(user), Some(password)) => {
                options = options
                    .with_user(user.clone(), password.expose())
                    .with_auto_token_refresh(true);
            }
            (Some(user), None) => {
                return Err(bad(format!(
                    "user {user:?} has no password: etcd authenticates with USER:PASSWORD@"
                )))
            }
            (None, _) => {}
        }
        const TLS_PARAMS: [&str; 3] = ["ca", "cert", "key"];
        let scheme = if tls {
            let ca = parsed.take("ca").ok_or_else(|| {
                bad(
                    "etcds:// needs ca=FILE, the CA certificate that signed the etcd servers' \
                     certificates"
                        .into(),
                )
            })?;
            let (ca, _) = tls::read_ca("ca", &ca).map_err(bad)?;
            let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
            match (parsed.take("cert"), parsed.take("key")) {
                (Some(cert), Some(key)) => {
                    let (cert, key) = tls::read_identity(&cert, &key).map_err(bad)?;
                    config = config.identity(Identity::from_pem(cert, key));
                }
                (None, None) => {}
                _ => return Err(bad("cert and key go together".into())),
            }
            parsed.refuse_the_rest(&TLS_PARAMS).map_err(bad)?;
            options = options.with_tls(config);
            "https"
        } else {
            if let Some(p) = TLS_PARAMS.into_iter().find(|p| parsed.take(p).is_some()) {
                return Err(bad(format!(
                    "{p}= is a TLS parameter, and etcd:// is plaintext: use etcds://"
                )));
            }
            parsed.refuse_the_rest(&[]).map_err(bad)?;
            "http"
        };
        let endpoints: Vec<String> = parsed
            .hosts
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let client = etcd_client::Client::connect(endpoints, Some(options))
            .await
            .map_err(map)?;
        Ok(Etcd {
            client: Arc::new(client),
        })
    }

    /// Put this session's key in `election` unless it is there already; returns the key's
    /// create revision.
    async fn enqueue(&self, election: &str, session: u64, value: &[u8]) -> Result<i64> {
        check_election(election)?;
        let k = key(election, session);
        let put = PutOptions::new().with_lease(lease(session)?);
        let txn = Txn::new()
            .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(k.clone(), value.to_vec(), Some(put)),
                TxnOp::put(known(election), Vec::new(), None),
            ]);
        self.client.kv_client().txn(txn).await.map_err(map)?;
        let r = self.client.kv_client().get(k, None).await.map_err(map)?;
        match r.kvs().first() {
            Some(kv) => Ok(kv.create_revision()),
            // Deleted by the lease's expiry in between.
            None => Err(Error::SessionLost),
        }
    }

    /// Write (`Some`) or delete (`None`) the fenced key `key` as `fence` (module
    /// [`kv`]: read, judge, compare-and-set); the write's revision and whether the key
    /// existed.
    async fn fenced_write(
        &self,
        key: &str,
        value: Option<&[u8]>,
        fence: Fence<'_>,
    ) -> Result<(u64, bool)> {
        kv::check_request(key, value, fence)?;
        check_election(fence.election)?;
        let stored = format!("{KEYS_PREFIX}{key}");
        let mut client = self.client.kv_client();
        for _ in 0..kv::ATTEMPTS {
            // The election's leading candidacy, the key and the election's marker, read at
            // one revision.
            let lowest = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1);
            let read = Txn::new().and_then([
                TxnOp::get(prefix(fence.election), Some(lowest)),
                TxnOp::get(stored.clone(), None),
                TxnOp::get(
                    known(fence.election),
                    Some(GetOptions::new().with_count_only()),
                ),
            ]);
            let r = client.txn(read).await.map_err(map)?;
            let [lead, current, marker] = gets(&r)?;
            let lead = lead
                .kvs()
                .first()
                .map(|kv| (kv.key().to_vec(), kv.create_revision()));
            let leading = match (&lead, marker.count()) {
                (Some((_, token)), _) => Leading::Token(*token as u64),
                (None, 0) => Leading::Unknown,
                (None, _) => Leading::Nobody,
            };
            let current = current.kvs().first();
            let bound = current
                .map(|kv| Record::decode(key, kv.value()))
                .transpose()?;
            kv::judge(key, fence, leading, bound.as_ref())?;
            let (lead_key, token) = lead.expect("judged: a candidacy leads");
            let op = match value {
                Some(v) => TxnOp::put(
                    stored.clone(),
                    Record::encode(fence.election, fence.token, v),
                    None,
                ),
                None => TxnOp::delete(stored.clone(), None),
            };
            // The same leading candidacy, and the key as read (revision 0: absent).
            let at = current.map_or(0, |kv| kv.mod_revision());
            let write = Txn::new()
                .when([
                    Compare::create_revision(lead_key, CompareOp::Equal, token),
                    Compare::mod_revision(stored.clone(), CompareOp::Equal, at),
                ])
                .and_then([op]);
            let r = client.txn(write).await.map_err(map)?;
            if r.succeeded() {
                let revision = r.header().map_or(0, |h| h.revision());
                return Ok((revision as u64, current.is_some()));
            }
        }
        Err(kv::contended("etcd", key))
    }

    /// Whether someone ever campaigned in `election`.
    async fn check_known(&self, election: &str) -> Result<()> {
        check_election(election)?;
        let r = self
            .client
            .kv_client()
            .get(known(election), Some(GetOptions::new().with_count_only()))
            .await
            .map_err(map)?;
        if r.count() == 0 {
            return Err(Error::UnknownElection(election.to_string()));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Backend for Etcd {
    fn capabilities(&self) -> Capabilities {
        // Each candidate watches only its predecessor's key; the recipe is FIFO by create
        // revision, with no hand-over to a named candidate.
        Capabilities::recipe("etcd", true)
    }

    async fn fenced_put(&self, key: &str, value: &[u8], fence: Fence<'_>) -> Result<u64> {
        Ok(self.fenced_write(key, Some(value), fence).await?.0)
    }

    async fn fenced_delete(&self, key: &str, fence: Fence<'_>) -> Result<bool> {
        Ok(self.fenced_write(key, None, fence).await?.1)
    }

    async fn get(&self, key: &str) -> Result<Option<FencedValue>> {
        kv::check_get(key)?;
        let r = self
            .client
            .kv_client()
            .get(format!("{KEYS_PREFIX}{key}"), None)
            .await
            .map_err(map)?;
        let Some(kv) = r.kvs().first() else {
            return Ok(None);
        };
        let record = Record::decode(key, kv.value())?;
        Ok(Some(FencedValue {
            value: record.value,
            election: record.election,
            token: record.token,
            index: kv.mod_revision() as u64,
        }))
    }

    fn spawn_keepalive(&self, session: Arc<Session>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(keepalive_loop(self.clone(), session))
    }

    /// Grant a lease of at least `ttl` (etcd counts whole seconds).
    async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
        let secs = i64::try_from(ttl.as_millis().div_ceil(1000))
            .map_err(|_| Error::InvalidArgument(format!("ttl {ttl:?} is too long")))?;
        let r = self
            .client
            .lease_client()
            .grant(secs.max(1), None)
            .await
            .map_err(map)?;
        if !r.error().is_empty() {
            return Err(Error::Backend(format!("etcd: {}", r.error())));
        }
        let granted = Duration::from_secs(u64::try_from(r.ttl()).unwrap_or(0));
        Ok((r.id() as u64, granted))
    }

    async fn revoke(&self, session: u64) -> Result<()> {
        match self.client.lease_client().revoke(lease(session)?).await {
            Ok(_) => Ok(()),
            Err(e) => match map(e) {
                Error::SessionLost => Ok(()),
                e => Err(e),
            },
        }
    }

    /// Record the candidacy without waiting.
    async fn join(&self, election: &str, session: u64, value: &[u8]) -> Result<Option<u64>> {
        self.enqueue(election, session, value).await.map(|_| None)
    }

    /// Record the candidacy (idempotent) and wait until it leads; returns its token.
    async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
        let mine = self.enqueue(election, session, value).await?;
        let k = key(election, session);
        let mut kv = self.client.kv_client();
        loop {
            // The predecessor: the live key created last before ours.
            let r = kv
                .get(
                    prefix(election),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_max_create_revision(mine - 1)
                            .with_sort(SortTarget::Create, SortOrder::Descend)
                            .with_limit(1),
                    ),
                )
                .await
                .map_err(map)?;
            let Some(pred) = r.kvs().first() else {
                // Nobody before us: we lead, if our key is still there.
                let me = kv.get(k.clone(), None).await.map_err(map)?;
                return match me.kvs().first() {
                    Some(m) if m.create_revision() == mine => Ok(mine as u64),
                    _ => Err(Error::SessionLost),
                };
            };
            let pred_key = pred.key().to_vec();
            let from = r.header().map(|h| h.revision()).unwrap_or(0) + 1;
            let mut stream = self
                .client
                .watch_client()
                .watch(
                    pred_key,
                    Some(WatchOptions::new().with_start_revision(from)),
                )
                .await
                .map_err(map)?;
            'wait: loop {
                match stream.message().await.map_err(map)? {
                    Some(resp) => {
                        if resp.canceled() {
                            break 'wait;
                        }
                        if resp
                            .events()
                            .iter()
                            .any(|e| e.event_type() == EventType::Delete)
                        {
                            break 'wait;
                        }
                    }
                    None => break 'wait,
                }
            }
            crate::note_waiter_wakeup();
            // Dropping the stream cancels the watch.
            drop(stream);
        }
    }

    async fn resign(&self, election: &str, session: u64) -> Result<()> {
        check_election(election)?;
        self.client
            .kv_client()
            .delete(key(election, session), None)
            .await
            .map_err(map)?;
        Ok(())
    }

    async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        self.check_known(election).await?;
        let r = self
            .client
            .kv_client()
            .get(
                prefix(election),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend)
                        .with_limit(1),
                ),
            )
            .await
            .map_err(map)?;
        Ok(r.kvs().first().map(info))
    }

    async fn observe(&self, election: &str, tx: mpsc::Sender<Result<LeaderEvent>>) -> Result<()> {
        self.check_known(election).await?;
        let r = self
            .client
            .kv_client()
            .get(prefix(election), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(map)?;
        let revision = r.header().map(|h| h.revision()).unwrap_or(0);
        // The election's keys, by key: (create revision, leader info).
        let mut keys: BTreeMap<Vec<u8>, LeaderInfo> = r
            .kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), info(kv)))
            .collect();
        let mut stream = self
            .client
            .watch_client()
            .watch(
                prefix(election),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1),
                ),
            )
            .await
            .map_err(map)?;
        let election = election.to_string();
        let lowest =
            |keys: &BTreeMap<Vec<u8>, LeaderInfo>| keys.values().min_by_key(|l| l.token).cloned();
        let mut current = lowest(&keys);
        let first = LeaderEvent {
            election: election.clone(),
            leader: current.clone(),
            index: revision as u64,
        };
        if tx.send(Ok(first)).await.is_err() {
            return Ok(());
        }
        tokio::spawn(async move {
            loop {
                let resp = tokio::select! {
                    r = stream.message() => r,
                    _ = tx.closed() => return,
                };
                let resp = match resp {
                    Ok(Some(resp)) => resp,
                    Ok(None) => {
                        let _ = tx
                            .send(Err(Error::Unavailable("etcd: the watch ended".into())))
                            .await;
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(map(e))).await;
                        return;
                    }
                };
                if resp.canceled() {
                    let _ = tx
                        .send(Err(Error::Unavailable(format!(
                            "etcd: the watch was canceled: {}",
                            resp.cancel_reason()
                        ))))
                        .await;
                    return;
                }
                // Apply the events revision by revision, reporting each change of the lowest
                // key at the revision where it happened.
                let events = resp.events();
                let mut i = 0;
                while i < events.len() {
                    let rev = events[i].kv().map(|kv| kv.mod_revision()).unwrap_or(0);
                    while i < events.len()
                        && events[i].kv().map(|kv| kv.mod_revision()).unwrap_or(0) == rev
                    {
                        let e = &events[i];
                        if let Some(kv) = e.kv() {
                            match e.event_type() {
                                EventType::Put => {
                                    keys.insert(kv.key().to_vec(), info(kv));
                                }
                                EventType::Delete => {
                                    keys.remove(kv.key());
                                }
                            }
                        }
                        i += 1;
                    }
                    let now = lowest(&keys);
                    if now != current {
                        current = now.clone();
                        let ev = LeaderEvent {
                            election: election.clone(),
                            leader: now,
                            index: rev as u64,
                        };
                        if tx.send(Ok(ev)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

/// Renew `session` every TTL/4 over one `LeaseKeepAlive` stream (reopened when it fails)
/// until the task is stopped or etcd says the lease is gone.
pub(crate) async fn keepalive_loop(etcd: Etcd, session: Arc<Session>) {
    let Ok(id) = lease(session.id) else {
        session.end();
        return;
    };
    let every = session.ttl / 4;
    let mut leases = etcd.client.lease_client();
    loop {
        let sent = Instant::now();
        let (mut keeper, mut stream) = match leases.keep_alive(id).await {
            // Opening the stream renews once: etcd answered with a positive TTL, which for
            // etcd is the lease's full granted TTL.
            Ok(pair) => {
                session.acked(sent, session.ttl);
                pair
            }
            Err(e) => {
                if map(e) == Error::SessionLost {
                    session.end();
                    return;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        loop {
            tokio::time::sleep(every).await;
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match tokio::time::timeout(session.ttl, stream.message()).await {
                Ok(Ok(Some(resp))) => {
                    if resp.ttl() <= 0 {
                        session.end();
                        return;
                    }
                    session.acked(sent, Duration::from_secs(resp.ttl() as u64));
                }
                _ => break,
            }
        }
    }
}
