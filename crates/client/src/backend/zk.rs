//! The `zk://` backend: ZooKeeper's leader-election recipe (DESIGN.md, "Backends").
//!
//! - A session is a ZooKeeper session of its own (one connection per tenure session), opened
//!   with session timeout = TTL; the holder believes the timeout the server negotiated
//!   (ZooKeeper clamps it to `[minSessionTimeout, maxSessionTimeout]`). Its id is the
//!   ZooKeeper session id.
//! - A candidacy is an ephemeral sequential znode `/tenure/elections/<election>/n-<seq>`
//!   created by that session, with the candidate's value as data. The smallest sequence
//!   leads; the fencing token is that znode's creation zxid (`czxid`). Sequence numbers are
//!   assigned in zxid order, and a later leader's znode cannot be older than an earlier
//!   leader's (it would then have been the smaller one while the earlier one led), so tokens
//!   strictly increase.
//! - A candidate waits with a one-shot `exists` watch on its predecessor only (the live znode
//!   with the largest sequence below its own): no herd.
//! - `leader` lists the children after a `sync` and reads the smallest; `observe` keeps a
//!   persistent recursive watch on the election's directory (registered before the first
//!   listing, so no change falls between) and reports each change of the smallest znode.
//!   ZooKeeper 3.8 sends no zxid with watch events, so an event's index is the new leader's
//!   `czxid`, or for a departure the directory's `pzxid` read afterwards, raised to the last
//!   index + 1 when needed: strictly increasing, at or after the change's own zxid.
//! - The persistent directory `/tenure/elections/<election>` marks an election that was ever
//!   campaigned in: `leader`/`observe` of an election without it fail with
//!   [`Error::UnknownElection`].
//! - Resign deletes the znode (the successor's watch fires at once); revoke deletes the
//!   session's znodes and closes the session (re-attaching to it when its connection is gone).
//!
//! # Lease validity (DESIGN.md rule 4): what this relies on
//!
//! The `zookeeper-client` crate pings internally and does not expose ping responses, so the
//! keepalive task sends its own request, `exists("/")` on the session's connection, every
//! TTL/10, and on each answer moves validity to `send time of that request + negotiated
//! session timeout − drift margin`. It relies on:
//!
//! 1. A ZooKeeper server "touches" a session when it receives any request of it, and the
//!    session tracker expires it no earlier than `last touch + session timeout` (rounded up to
//!    the next tickTime). A request answered was received after it was sent, so the server's
//!    expiry is after the holder's belief ends, with the margin covering clock-rate drift.
//! 2. On a standalone server (what the tests run) that server is the arbiter, so 1. is all.
//!    On an ensemble, expiry is decided by the ZooKeeper leader, which learns of touches at
//!    followers from their pings (every tickTime/2), and a follower cut off from the leader
//!    keeps answering reads for up to `syncLimit × tickTime`. The holder's belief can then
//!    outlast the leader's expiry by up to about `syncLimit × tickTime`: on an ensemble,
//!    size `CampaignOptions::drift` so that the drift margin covers that, or keep TTL ≫ that bound.
//!
//! Dropping the connection without closing the session (what `stop_keepalives` does: the
//! client is "detached") is how a frozen or crashed holder looks to ZooKeeper.
//!
//! Not supported: [`crate::Leadership::transfer`] (the recipe has no hand-over to a named
//! candidate); it fails with [`Error::UnsupportedBackend`].
//!
//! # Security: digest authentication and ACLs
//!
//! `zk://USER:PASSWORD@HOST:PORT[,…][/CHROOT]` adds ZooKeeper's `digest` authentication
//! (`USER:PASSWORD`) to every connection of the client (the shared one and each session's),
//! and every znode it creates — `/tenure`, `/tenure/elections`, the election's directory and
//! the candidacies — gets the ACL `auth` with all permissions (ZooKeeper's CREATOR_ALL): only
//! a connection authenticated as the same digest identity can read them, create candidacies
//! in an election, delete a candidacy (deleting needs DELETE on the parent, which is the
//! election's directory) or change data or ACLs. Any other client, without credentials or
//! with other ones, is refused (`NoAuth`, here [`Error::PermissionDenied`]); so two identities
//! that share an ensemble need a chroot each. A wrong password is not refused when
//! connecting: ZooKeeper's digest scheme takes any `user:password` as an identity, which then
//! matches no ACL.
//!
//! Without `USER:PASSWORD@`, znodes are created open to anyone (`world:anyone`, all
//! permissions), as before. The digest crosses the network in the clear (ZooKeeper's TLS is
//! not built here), so it keeps out other clients of the ensemble, not someone who can read
//! the traffic.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use zookeeper_client as zkc;

use super::kv::{self, Leading, Record};
use super::{Backend, Capabilities, Fence};
use crate::session::Session;
use crate::url::HostsUrl;
use crate::{Error, FencedValue, LeaderEvent, LeaderInfo, Result};

/// Where elections live.
const ELECTIONS: &str = "/tenure/elections";
/// Where fenced keys live: one persistent znode per key, named by the key's bytes in hex,
/// holding a [`Record`] (empty between its creation and its first write).
const KEYS: &str = "/tenure/keys";
/// The candidacy znodes' name prefix (ZooKeeper appends the sequence).
const NODE_PREFIX: &str = "n-";
/// How long establishing a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The session timeout of the shared connection used for reads, watches and deletes.
const SHARED_SESSION: Duration = Duration::from_secs(10);
/// The shortest pause between keepalive requests.
const MIN_KEEPALIVE_EVERY: Duration = Duration::from_millis(20);

/// A connection to a ZooKeeper ensemble. Cheap to clone; clones share connections.
#[derive(Clone)]
pub(crate) struct Zk {
    inner: Arc<Inner>,
}

struct Inner {
    /// The connect string (`host:port,host:port[/chroot]`).
    hosts: String,
    /// `user:password` for digest authentication, if the URL gave one.
    digest: Option<Digest>,
    /// Shared connection: reads, watches, deletes. Its own session owns no candidacy.
    shared: zkc::Client,
    /// This process's sessions, by id.
    sessions: Mutex<HashMap<u64, Slot>>,
}

/// One session granted by this process.
struct Slot {
    /// The session's client, until the keepalive task takes it (then only `weak`): once the
    /// task stops, the connection is dropped without closing the session.
    client: Option<Arc<zkc::Client>>,
    weak: Weak<zkc::Client>,
    /// To re-attach to the session in order to close it.
    info: zkc::SessionInfo,
    timeout: Duration,
    /// The session's candidacy in each election: (znode name, czxid).
    nodes: HashMap<String, (String, i64)>,
}

impl std::fmt::Debug for Zk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zk")
            .field("hosts", &self.inner.hosts)
            .finish_non_exhaustive()
    }
}

/// `user:password` for ZooKeeper's digest scheme. `Debug` does not show it.
struct Digest(Vec<u8>);

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Digest(***)")
    }
}

/// Translate a ZooKeeper client error.
fn map(e: zkc::Error) -> Error {
    use zkc::Error as E;
    match e {
        E::NoAuth => Error::PermissionDenied(
            "zookeeper: the znode's ACL does not admit this client (another digest user, or \
             none)"
                .into(),
        ),
        E::AuthFailed => Error::AuthenticationFailed("zookeeper: authentication failed".into()),
        E::SessionExpired | E::SessionMoved | E::ClientClosed => Error::SessionLost,
        E::ConnectionLoss | E::Timeout | E::NoHosts | E::Throttled => {
            Error::Unavailable(format!("zookeeper: {e}"))
        }
        E::BadArguments(_) => Error::InvalidArgument(format!("zookeeper: {e}")),
        e => Error::Backend(format!("zookeeper: {e}")),
    }
}

fn check_election(election: &str) -> Result<()> {
    if election.is_empty() {
        return Err(Error::InvalidArgument("empty election name".into()));
    }
    if election.contains('/')
        || election == "."
        || election == ".."
        || election.chars().any(|c| c.is_control())
    {
        return Err(Error::InvalidArgument(format!(
            "election name {election:?} is not a valid znode name (no '/', '.', '..' or \
             control characters)"
        )));
    }
    Ok(())
}

fn dir(election: &str) -> String {
    format!("{ELECTIONS}/{election}")
}

/// The znode of fenced key `key` (hex: a key may hold '/' and anything else).
fn key_path(key: &str) -> String {
    use std::fmt::Write as _;
    let mut path = format!("{KEYS}/k");
    for b in key.bytes() {
        let _ = write!(path, "{b:02x}");
    }
    path
}

/// The sequence number of a candidacy znode's name.
fn sequence(name: &str) -> Option<i64> {
    name.strip_prefix(NODE_PREFIX)?.parse().ok()
}

fn info(data: Vec<u8>, stat: &zkc::Stat) -> LeaderInfo {
    LeaderInfo {
        session: stat.ephemeral_owner as u64,
        value: data,
        token: stat.czxid as u64,
    }
}

/// A connector for a session of `timeout`, authenticated with `digest` if given.
fn connector(timeout: Duration, digest: Option<&Digest>) -> zkc::Connector {
    let connector = zkc::Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(CONNECT_TIMEOUT)
        .with_fail_eagerly();
    match digest {
        Some(Digest(auth)) => connector.with_auth("digest", auth),
        None => connector,
    }
}

impl Inner {
    /// A connector for a session of `timeout`, authenticated if the URL says so.
    fn connector(&self, timeout: Duration) -> zkc::Connector {
        connector(timeout, self.digest.as_ref())
    }

    /// The ACL of every znode this client creates (see the module docs).
    fn acls(&self) -> zkc::Acls<'static> {
        match self.digest {
            Some(_) => zkc::Acls::creator_all(),
            None => zkc::Acls::anyone_all(),
        }
    }
}

impl Zk {
    /// Connect as `url` says; `rest` is what follows `zk://` (see the module docs).
    pub async fn connect(url: &str, parsed: HostsUrl) -> Result<Zk> {
        let bad = |why: String| Error::InvalidUrl {
            url: crate::redact_url(url),
            why: format!("zookeeper: {why}"),
        };
        parsed.refuse_the_rest(&[]).map_err(bad)?;
        let digest = match (&parsed.user, &parsed.password) {
            (Some(user), Some(password)) => {
                Some(Digest(format!("{user}:{}", password.expose()).into_bytes()))
            }
            (Some(user), None) => {
                return Err(bad(format!(
                    "user {user:?} has no password: digest authentication takes \
                     USER:PASSWORD@"
                )))
            }
            (None, _) => None,
        };
        // The chroot, if any, ends the connect string.
        let hosts = format!("{}{}", parsed.hosts.join(","), parsed.path);
        let shared = connector(SHARED_SESSION, digest.as_ref())
            .connect(&hosts)
            .await
            .map_err(map)?;
        Ok(Zk {
            inner: Arc::new(Inner {
                hosts,
                digest,
                shared,
                sessions: Mutex::new(HashMap::new()),
            }),
        })
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<u64, Slot>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The client of a live session of this process.
    fn session_client(&self, session: u64) -> Result<Arc<zkc::Client>> {
        let sessions = self.sessions();
        let slot = sessions.get(&session).ok_or(Error::SessionLost)?;
        slot.client
            .clone()
            .or_else(|| slot.weak.upgrade())
            .ok_or(Error::SessionLost)
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self.inner.shared.delete(path, None).await {
            Ok(()) | Err(zkc::Error::NoNode) => Ok(()),
            Err(e) => Err(map(e)),
        }
    }

    /// Create this session's znode in `election` unless it has one; returns its name and czxid.
    async fn enqueue(&self, election: &str, session: u64, value: &[u8]) -> Result<(String, i64)> {
        check_election(election)?;
        let known = self
            .sessions()
            .get(&session)
            .and_then(|s| s.nodes.get(election).cloned());
        if let Some(node) = known {
            return Ok(node);
        }
        let client = self.session_client(session)?;
        let dir = dir(election);
        let acls = self.inner.acls();
        client
            .mkdir(&dir, &zkc::CreateMode::Persistent.with_acls(acls))
            .await
            .map_err(map)?;
        let (stat, seq) = client
            .create(
                &format!("{dir}/{NODE_PREFIX}"),
                value,
                &zkc::CreateMode::EphemeralSequential.with_acls(acls),
            )
            .await
            .map_err(map)?;
        let node = (format!("{NODE_PREFIX}{seq}"), stat.czxid);
        let recorded = match self.sessions().get_mut(&session) {
            Some(slot) => {
                slot.nodes.insert(election.to_string(), node.clone());
                true
            }
            None => false,
        };
        if !recorded {
            // Revoked meanwhile: do not leave the znode behind.
            drop(client);
            self.delete(&format!("{dir}/{}", node.0)).await?;
            return Err(Error::SessionLost);
        }
        Ok(node)
    }

    /// The election's candidacy znodes, or [`Error::UnknownElection`].
    async fn children(&self, election: &str) -> Result<(Vec<(i64, String)>, zkc::Stat)> {
        check_election(election)?;
        match self.inner.shared.get_children(&dir(election)).await {
            Ok((children, stat)) => {
                let mut seqs: Vec<(i64, String)> = children
                    .into_iter()
                    .filter_map(|c| sequence(&c).map(|s| (s, c)))
                    .collect();
                seqs.sort();
                Ok((seqs, stat))
            }
            Err(zkc::Error::NoNode) => Err(Error::UnknownElection(election.to_string())),
            Err(e) => Err(map(e)),
        }
    }

    /// Read a candidacy znode; `None` if it is gone.
    async fn read(&self, path: &str) -> Result<Option<LeaderInfo>> {
        match self.inner.shared.get_data(path).await {
            Ok((data, stat)) => Ok(Some(info(data, &stat))),
            Err(zkc::Error::NoNode) => Ok(None),
            Err(e) => Err(map(e)),
        }
    }

    /// The record at `path` and its znode's stat; `None` if the znode is absent, a record
    /// `None` while it was never written.
    async fn record(&self, key: &str, path: &str) -> Result<Option<(Option<Record>, zkc::Stat)>> {
        match self.inner.shared.get_data(path).await {
            Ok((data, stat)) if data.is_empty() => Ok(Some((None, stat))),
            Ok((data, stat)) => Ok(Some((Some(Record::decode(key, &data)?), stat))),
            Err(zkc::Error::NoNode) => Ok(None),
            Err(e) => Err(map(e)),
        }
    }

    /// Write (`Some`) or delete (`None`) the fenced key `key` as `fence` (module [`kv`]:
    /// read, judge, then a `multi` that checks the leading candidacy's and the key's
    /// versions); the write's zxid and whether the key held a record.
    async fn fenced_write(
        &self,
        key: &str,
        value: Option<&[u8]>,
        fence: Fence<'_>,
    ) -> Result<(u64, bool)> {
        kv::check_request(key, value, fence)?;
        check_election(fence.election)?;
        let (shared, path) = (&self.inner.shared, key_path(key));
        let dir = dir(fence.election);
        for _ in 0..kv::ATTEMPTS {
            let lead = match self.children(fence.election).await {
                Ok((children, _)) => match children.into_iter().next() {
                    Some((_, name)) => {
                        let node = format!("{dir}/{name}");
                        match shared.check_stat(&node).await.map_err(map)? {
                            Some(stat) => Some((node, stat)),
                            // Gone since the listing: look again.
                            None => continue,
                        }
                    }
                    None => None,
                },
                // An unknown election (kv::judge's Leading::Unknown), or a failure.
                Err(e) => return Err(e),
            };
            let current = self.record(key, &path).await?;
            let leading = lead.as_ref().map_or(Leading::Nobody, |(_, stat)| {
                Leading::Token(stat.czxid as u64)
            });
            let bound = current.as_ref().and_then(|(r, _)| r.as_ref());
            kv::judge(key, fence, leading, bound)?;
            let (node, lead) = lead.expect("judged: a candidacy leads");
            let existed = bound.is_some();
            let mut multi = shared.new_multi_writer();
            multi.add_check_version(&node, lead.version).map_err(map)?;
            match (value, &current) {
                (Some(v), Some((_, stat))) => {
                    let record = Record::encode(fence.election, fence.token, v);
                    multi
                        .add_set_data(&path, &record, Some(stat.version))
                        .map_err(map)?;
                }
                (Some(_), None) => {
                    // Create the key's znode, empty, then write it as above.
                    let acls = self.inner.acls();
                    shared
                        .mkdir(KEYS, &zkc::CreateMode::Persistent.with_acls(acls))
                        .await
                        .map_err(map)?;
                    let empty = zkc::CreateMode::Persistent.with_acls(acls);
                    match shared.create(&path, &[], &empty).await {
                        Ok(_) | Err(zkc::Error::NodeExists) => continue,
                        Err(e) => return Err(map(e)),
                    }
                }
                (None, Some((_, stat))) => {
                    multi.add_delete(&path, Some(stat.version)).map_err(map)?
                }
                (None, None) => return Ok((0, false)),
            }
            match multi.commit().await {
                Ok(results) => {
                    let zxid = match results.into_iter().nth(1) {
                        Some(zkc::MultiWriteResult::SetData { stat }) => stat.mzxid as u64,
                        _ => 0,
                    };
                    return Ok((zxid, existed));
                }
                Err(zkc::MultiWriteError::OperationFailed {
                    source: zkc::Error::BadVersion | zkc::Error::NoNode,
                    ..
                }) => continue,
                Err(e) => return Err(map(e.into())),
            }
        }
        Err(kv::contended("zookeeper", key))
    }

    /// Take the session's client for its keepalive task (see [`Slot::client`]).
    fn take_client(&self, session: u64) -> Option<Arc<zkc::Client>> {
        let mut sessions = self.sessions();
        let slot = sessions.get_mut(&session)?;
        slot.client.take().or_else(|| slot.weak.upgrade())
    }
}

#[async_trait::async_trait]
impl Backend for Zk {
    fn capabilities(&self) -> Capabilities {
        // Each candidate watches only its predecessor; the smallest sequence leads.
        Capabilities::recipe("zk", true)
    }

    async fn fenced_put(&self, key: &str, value: &[u8], fence: Fence<'_>) -> Result<u64> {
        Ok(self.fenced_write(key, Some(value), fence).await?.0)
    }

    async fn fenced_delete(&self, key: &str, fence: Fence<'_>) -> Result<bool> {
        Ok(self.fenced_write(key, None, fence).await?.1)
    }

    async fn get(&self, key: &str) -> Result<Option<FencedValue>> {
        kv::check_get(key)?;
        let path = key_path(key);
        // Catch up with the ensemble's leader first (as `leader` does).
        match self.inner.shared.sync(&path).await {
            Ok(()) | Err(zkc::Error::NoNode) => {}
            Err(e) => return Err(map(e)),
        }
        Ok(match self.record(key, &path).await? {
            Some((Some(r), stat)) => Some(FencedValue {
                value: r.value,
                election: r.election,
                token: r.token,
                index: stat.mzxid as u64,
            }),
            _ => None,
        })
    }

    fn spawn_keepalive(&self, session: Arc<Session>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(keepalive_loop(self.clone(), session))
    }

    /// Open a session of `ttl` on its own connection; returns its id and the timeout the
    /// server negotiated.
    async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
        let client = self
            .inner
            .connector(ttl)
            .with_detached()
            .connect(&self.inner.hosts)
            .await
            .map_err(map)?;
        let id = client.session_id().0 as u64;
        let timeout = client.session_timeout();
        let info = client.session().clone();
        let client = Arc::new(client);
        self.sessions().insert(
            id,
            Slot {
                weak: Arc::downgrade(&client),
                client: Some(client),
                info,
                timeout,
                nodes: HashMap::new(),
            },
        );
        Ok((id, timeout))
    }

    /// Delete the session's znodes and close it.
    async fn revoke(&self, session: u64) -> Result<()> {
        let Some(slot) = self.sessions().remove(&session) else {
            return Ok(());
        };
        for (election, (name, _)) in &slot.nodes {
            self.delete(&format!("{}/{name}", dir(election))).await?;
        }
        let live = slot.client.clone().or_else(|| slot.weak.upgrade());
        drop(slot.client);
        if live.is_some() {
            // Still connected (a campaign in flight): dropping the last handle of a detached
            // client does not close the session; it then expires after its timeout, with no
            // znode left.
            return Ok(());
        }
        // Re-attach without `detached`: dropping that client closes the session.
        match self
            .inner
            .connector(slot.timeout)
            .with_session(slot.info)
            .connect(&self.inner.hosts)
            .await
        {
            Ok(c) => {
                drop(c);
                Ok(())
            }
            Err(zkc::Error::SessionExpired) => Ok(()),
            Err(e) => Err(map(e)),
        }
    }

    /// Record the candidacy without waiting.
    async fn join(&self, election: &str, session: u64, value: &[u8]) -> Result<Option<u64>> {
        self.enqueue(election, session, value).await.map(|_| None)
    }

    /// Record the candidacy (idempotent) and wait until it leads; returns its token.
    async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
        let (name, czxid) = self.enqueue(election, session, value).await?;
        let mine = sequence(&name).ok_or_else(|| Error::Backend(format!("bad znode {name}")))?;
        let dir = dir(election);
        // Read on the session's own connection: it sees its own create (ZooKeeper's
        // per-session ordering), and its watches fire on session expiry.
        let client = self.session_client(session)?;
        loop {
            let children = client.list_children(&dir).await.map_err(map)?;
            let seqs: Vec<(i64, &String)> = children
                .iter()
                .filter_map(|c| sequence(c).map(|s| (s, c)))
                .collect();
            if !seqs.iter().any(|(s, _)| *s == mine) {
                return Err(Error::SessionLost);
            }
            let Some((_, pred)) = seqs
                .iter()
                .filter(|(s, _)| *s < mine)
                .max_by_key(|(s, _)| *s)
            else {
                return Ok(czxid as u64);
            };
            let (stat, watcher) = client
                .check_and_watch_stat(&format!("{dir}/{pred}"))
                .await
                .map_err(map)?;
            if stat.is_none() {
                continue;
            }
            let ev = watcher.changed().await;
            crate::note_waiter_wakeup();
            if ev.event_type == zkc::EventType::Session && ev.session_state.is_terminated() {
                return Err(Error::SessionLost);
            }
        }
    }

    async fn resign(&self, election: &str, session: u64) -> Result<()> {
        check_election(election)?;
        let node = self
            .sessions()
            .get_mut(&session)
            .and_then(|s| s.nodes.remove(election));
        if let Some((name, _)) = node {
            self.delete(&format!("{}/{name}", dir(election))).await?;
        }
        Ok(())
    }

    async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        check_election(election)?;
        let dir = dir(election);
        // Catch up with the ensemble's leader first, so that the answer is not older than
        // this call.
        match self.inner.shared.sync(&dir).await {
            Ok(()) | Err(zkc::Error::NoNode) => {}
            Err(e) => return Err(map(e)),
        }
        let (children, _) = self.children(election).await?;
        for (_, name) in children {
            if let Some(l) = self.read(&format!("{dir}/{name}")).await? {
                return Ok(Some(l));
            }
        }
        Ok(None)
    }

    async fn observe(&self, election: &str, tx: mpsc::Sender<Result<LeaderEvent>>) -> Result<()> {
        check_election(election)?;
        let dir = dir(election);
        // Watch first, then list: every change after the listing is in the watch.
        let mut watcher = self
            .inner
            .shared
            .watch(&dir, zkc::AddWatchMode::PersistentRecursive)
            .await
            .map_err(map)?;
        let (children, stat) = self.children(election).await?;
        let mut nodes: BTreeMap<i64, LeaderInfo> = BTreeMap::new();
        for (seq, name) in children {
            if let Some(l) = self.read(&format!("{dir}/{name}")).await? {
                nodes.insert(seq, l);
            }
        }
        let mut index = stat.pzxid as u64;
        let mut current = nodes.values().next().cloned();
        let first = LeaderEvent {
            election: election.to_string(),
            leader: current.clone(),
            index,
        };
        if tx.send(Ok(first)).await.is_err() {
            return Ok(());
        }
        let zk = self.clone();
        let election = election.to_string();
        let child_prefix = format!("{dir}/");
        tokio::spawn(async move {
            loop {
                let ev = tokio::select! {
                    ev = watcher.changed() => ev,
                    _ = tx.closed() => return,
                };
                let child = ev
                    .path
                    .strip_prefix(&child_prefix)
                    .filter(|c| !c.contains('/'))
                    .and_then(|c| sequence(c).map(|s| (s, c.to_string())));
                let at = match (ev.event_type, child) {
                    (zkc::EventType::Session, _) => {
                        if ev.session_state == zkc::SessionState::SyncConnected
                            || ev.session_state == zkc::SessionState::ConnectedReadOnly
                        {
                            continue;
                        }
                        // Events during a disconnection may be lost (ZOOKEEPER-4698): end
                        // the stream rather than report a partial history.
                        let _ = tx
                            .send(Err(Error::Unavailable(format!(
                                "zookeeper: the watch ended ({:?})",
                                ev.session_state
                            ))))
                            .await;
                        return;
                    }
                    (zkc::EventType::NodeCreated, Some((seq, name))) => {
                        if nodes.contains_key(&seq) {
                            continue;
                        }
                        match zk.read(&format!("{child_prefix}{name}")).await {
                            Ok(Some(l)) => {
                                let at = l.token;
                                nodes.insert(seq, l);
                                at
                            }
                            // Gone already: its deletion event follows.
                            Ok(None) => continue,
                            Err(e) => {
                                let _ = tx.send(Err(e)).await;
                                return;
                            }
                        }
                    }
                    (zkc::EventType::NodeDeleted, Some((seq, _))) => {
                        if nodes.remove(&seq).is_none() {
                            continue;
                        }
                        0
                    }
                    _ => continue,
                };
                let now = nodes.values().next().cloned();
                if now == current {
                    continue;
                }
                let at = if at > 0 {
                    at
                } else {
                    match zk.inner.shared.check_stat(&dir).await {
                        Ok(Some(s)) => s.pzxid as u64,
                        Ok(None) => 0,
                        Err(e) => {
                            let _ = tx.send(Err(map(e))).await;
                            return;
                        }
                    }
                };
                index = at.max(index + 1);
                current = now.clone();
                let ev = LeaderEvent {
                    election: election.clone(),
                    leader: now,
                    index,
                };
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
        });
        Ok(())
    }
}

/// Keep `session` alive: an `exists("/")` request every TTL/10 on the session's connection,
/// each answer extending validity from its send time (see the module docs). The task owns the
/// session's connection: stopping it drops the connection without closing the session.
pub(crate) async fn keepalive_loop(zk: Zk, session: Arc<Session>) {
    let Some(client) = zk.take_client(session.id) else {
        session.end();
        return;
    };
    let every = (session.ttl / 10).max(MIN_KEEPALIVE_EVERY);
    loop {
        let sent = Instant::now();
        match tokio::time::timeout(session.ttl, client.check_stat("/")).await {
            Ok(Ok(_)) => session.acked(sent, session.ttl),
            Ok(Err(e)) if map(e.clone()) == Error::SessionLost => {
                session.end();
                return;
            }
            _ => {}
        }
        if client.state().is_terminated() {
            session.end();
            return;
        }
        tokio::time::sleep(every).await;
    }
}
