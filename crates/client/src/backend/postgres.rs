//! The `postgres://` backend: a lease row per election, the database clock as arbiter
//! (DESIGN.md, "Backends").
//!
//! - A session is a row of `tenure_pg_session` whose `expires_at` each keepalive moves to
//!   `now() + ttl`, only while it has not passed (an expired session never comes back). The
//!   holder's validity follows rule 4 from the send time of each acknowledged keepalive.
//! - A candidacy is a row of `tenure_pg_candidate`; `joined` (a sequence) gives FIFO order.
//! - The election is the row of `tenure_pg_lease`. One transaction, with that row locked,
//!   judges by `now()` whether its holder is still a live candidate; if not, the lease goes
//!   to the oldest live candidate (conditional `UPDATE`, `epoch + 1`: the fencing token) or
//!   is cleared when there is none. Any client may run it (a waiting candidate, a resigning
//!   holder, an observer): it only ever grants to the oldest live candidate. Every change is
//!   also appended to `tenure_pg_change` with the row's `version`, which is the event index,
//!   and announced with `NOTIFY tenure_pg, '<election>'`.
//! - Waiters and observers `LISTEN` on one connection per client (shared by its clones),
//!   opened by the first of them, and also re-check when the holder's session could have
//!   expired (an expired holder sends no notification).
//!
//! - A fenced key is a row of `tenure_pg_key` (the election it belongs to, the token of its
//!   last write, the value, and a position from a sequence). A fenced write runs in one
//!   transaction with the election's lease row locked: the lease is judged first (so a
//!   holder whose session ran out with a candidate waiting is replaced before its token is
//!   compared), then the state machine's own rule decides
//!   ([`tenure_core::sm::check_fence`]): the token must be the election's newest, and no
//!   older than the key's. A refused write changes nothing but the judged lease.
//!
//! Not supported: [`crate::Leadership::transfer`].
//!
//! # Security
//!
//! The URL is libpq's (`postgres://USER:PASSWORD@HOST:PORT/DB?…`), and the password is
//! answered to whatever the server asks for (SCRAM-SHA-256, with channel binding over TLS
//! when the server offers it). TLS (rustls with *ring*) follows `sslmode`:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | not given | no (as before; libpq's default would be `prefer`) | — |
//! | `disable` | no | — |
//! | `prefer` | if the server offers it, else plaintext | as `require` |
//! | `require` | yes | not checked; with `sslrootcert`, as `verify-ca` (as libpq does) |
//! | `verify-ca` | yes | signed by `sslrootcert` |
//! | `verify-full` | yes | signed by `sslrootcert` and naming the host dialed |
//!
//! `verify-ca` and `verify-full` need `sslrootcert=FILE` (there is no default file, and
//! `system` is not supported); `allow`, an unknown `sslmode` and `sslrootcert` with
//! `disable` (or without `sslmode`) are refused as [`Error::InvalidUrl`], as are the
//! parameters tokio-postgres does not know (such as `sslcert`: client certificates are not
//! built). A refused password, or a connection `pg_hba.conf` has no entry for, is
//! [`Error::AuthenticationFailed`]; a failed handshake (or a server without TLS under
//! `require`) is [`Error::Tls`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc, Mutex};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{kv, Backend, Capabilities, Fence};
use crate::session::Session;
use crate::tls::{self, PgVerify};
use crate::{Error, FencedValue, LeaderEvent, LeaderInfo, Result};

/// The notification channel; the payload is the election.
const CHANNEL: &str = "tenure_pg";
/// Longest wait between two checks of an election while waiting.
const MAX_WAIT: Duration = Duration::from_secs(1);
/// Pause before retrying a failed keepalive.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Notifications buffered for a listener that has not looked yet; one that falls further
/// behind re-checks its election (it may have missed its own).
const NOTIFICATIONS_BUFFERED_MAX: usize = 1024;

const SCHEMA: &str = "
BEGIN;
SELECT pg_advisory_xact_lock(7254031);
CREATE TABLE IF NOT EXISTS tenure_pg_session (
    id BIGSERIAL PRIMARY KEY,
    ttl_ms BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS tenure_pg_candidate (
    election TEXT NOT NULL,
    session BIGINT NOT NULL,
    value BYTEA NOT NULL,
    joined BIGSERIAL,
    PRIMARY KEY (election, session)
);
CREATE INDEX IF NOT EXISTS tenure_pg_candidate_session ON tenure_pg_candidate (session);
CREATE TABLE IF NOT EXISTS tenure_pg_lease (
    election TEXT PRIMARY KEY,
    holder BIGINT,
    value BYTEA,
    epoch BIGINT NOT NULL,
    version BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS tenure_pg_key (
    key TEXT PRIMARY KEY,
    election TEXT NOT NULL,
    token BIGINT NOT NULL,
    value BYTEA NOT NULL,
    position BIGINT NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS tenure_pg_key_position;
CREATE TABLE IF NOT EXISTS tenure_pg_change (
    election TEXT NOT NULL,
    version BIGINT NOT NULL,
    holder BIGINT,
    value BYTEA,
    epoch BIGINT NOT NULL,
    PRIMARY KEY (election, version)
);
COMMIT;
";

/// A connection to PostgreSQL. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub(crate) struct Pg {
    /// What the URL says (password included): `LISTEN` opens connections of its own.
    config: Arc<tokio_postgres::Config>,
    /// TLS as the URL's `sslmode` says (unused when it is `disable`).
    tls: MakeRustlsConnect,
    /// Transactions need the connection to themselves.
    client: Arc<Mutex<tokio_postgres::Client>>,
    /// The `LISTEN` connection, opened by the first waiter or observer.
    notifications: Arc<Mutex<Option<Arc<Notifications>>>>,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pg").finish_non_exhaustive()
    }
}

/// `e` and its causes, as one line: tokio-postgres's own message ("db error", "invalid
/// configuration") says little without them.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

fn map(e: tokio_postgres::Error) -> Error {
    let message = describe(&e);
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        return if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            // 28P01: a wrong password; 28000: pg_hba.conf admits no such connection (a
            // plaintext one where only TLS is allowed, an unknown user, …).
            Error::AuthenticationFailed(format!("postgres: {message}"))
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            Error::PermissionDenied(format!("postgres: {message}"))
        } else if [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ]
        .contains(code)
            || code.code().starts_with("08")
        {
            // The server ended this connection (an administrator's pg_terminate_backend, a
            // restart) or cannot take it yet: the next call opens another (`Pg::conn`).
            Error::Unavailable(format!("postgres: {message}"))
        } else {
            Error::Backend(format!("postgres: {message}"))
        };
    }
    if tls::rustls_cause(&e).is_some() {
        return Error::Tls(format!("postgres: {message}"));
    }
    // tokio-postgres has no public error kinds; these are its messages for a server without
    // TLS under `require` and for a password the server asks for and the URL lacks.
    if message.starts_with("error performing TLS handshake") {
        Error::Tls(format!("postgres: {message}"))
    } else if message.contains("password missing") {
        Error::AuthenticationFailed(format!(
            "postgres: the server asks for a password and the URL has none ({message})"
        ))
    } else {
        Error::Unavailable(format!("postgres: {message}"))
    }
}

/// The connection settings and TLS connector a `postgres://` URL asks for (see the module
/// docs): `sslmode` and `sslrootcert` are taken out here, the rest is tokio-postgres's to
/// parse.
fn parse_url(url: &str) -> Result<(tokio_postgres::Config, MakeRustlsConnect)> {
    let bad = |why: String| Error::InvalidUrl {
        url: crate::redact_url(url),
        why,
    };
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut sslmode, mut sslrootcert) = (None, None);
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value, slot) = match pair.split_once('=') {
            Some((name @ "sslmode", value)) => (name, value, &mut sslmode),
            Some((name @ "sslrootcert", value)) => (name, value, &mut sslrootcert),
            _ => {
                rest.push(pair);
                continue;
            }
        };
        let value = crate::url::decode(value)
            .map_err(|e| bad(format!("postgres: query parameter {name:?} {e}")))?;
        if slot.replace(value).is_some() {
            return Err(bad(format!(
                "postgres: query parameter {name:?} is given twice"
            )));
        }
    }
    let rebuilt = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    let mut config: tokio_postgres::Config = rebuilt
        .parse()
        .map_err(|e| bad(format!("postgres: {}", describe(&e))))?;
    let roots = match sslrootcert.as_deref() {
        Some("system") => {
            return Err(bad(
                "postgres: sslrootcert=system (the operating system's CAs) is \
                            not supported: name a CA file"
                    .into(),
            ))
        }
        Some(path) => Some(tls::read_ca("sslrootcert", path).map_err(bad)?.1),
        None => None,
    };
    let unverified = |roots: Option<rustls::RootCertStore>| match roots {
        Some(r) => PgVerify::Ca(r),
        None => PgVerify::Nothing,
    };
    let needs_root = |mode: &str| {
        bad(format!(
            "postgres: sslmode={mode} needs sslrootcert=FILE, the CA certificate that signed \
             the server's"
        ))
    };
    let (mode, verify) = match (sslmode.as_deref(), roots) {
        (None | Some("disable"), Some(_)) => {
            return Err(bad("postgres: sslrootcert is given but TLS is off: say \
                            sslmode=verify-full (or verify-ca, require)"
                .into()))
        }
        // Not libpq's default (`prefer`): without `sslmode` the connection is plaintext, as
        // it always was here. `prefer` keeps out no attacker in the middle, who can simply
        // answer that TLS is not offered.
        (None | Some("disable"), None) => (SslMode::Disable, PgVerify::Nothing),
        (Some("prefer"), roots) => (SslMode::Prefer, unverified(roots)),
        (Some("require"), roots) => (SslMode::Require, unverified(roots)),
        (Some("verify-ca"), Some(roots)) => (SslMode::Require, PgVerify::Ca(roots)),
        (Some("verify-full"), Some(roots)) => (SslMode::Require, PgVerify::Full(roots)),
        (Some(mode @ ("verify-ca" | "verify-full")), None) => return Err(needs_root(mode)),
        (Some("allow"), _) => {
            return Err(bad(
                "postgres: sslmode=allow is not supported (it tries plaintext \
                            first); use disable, prefer, require, verify-ca or verify-full"
                    .into(),
            ))
        }
        (Some(other), _) => {
            return Err(bad(format!(
                "postgres: unknown sslmode {other:?} (known: disable, prefer, require, \
                 verify-ca, verify-full)"
            )))
        }
    };
    config.ssl_mode(mode);
    let tls = MakeRustlsConnect::new(tls::pg_config(verify).map_err(bad)?);
    Ok((config, tls))
}

fn check_election(election: &str) -> Result<()> {
    if election.is_empty() {
        return Err(Error::InvalidArgument("empty election name".into()));
    }
    Ok(())
}

/// The lease row after [`Pg::advance`].
struct Lease {
    leader: Option<LeaderInfo>,
    version: i64,
    /// How long the holder's session has left by the database clock.
    remaining: Option<Duration>,
}

/// The one `LISTEN` connection of a client and its clones, shared by all of its waiters
/// and observers (one connection per waiter would cost the server a backend process each,
/// and each a TLS handshake and a SCRAM exchange).
struct Notifications {
    /// The payload (the election) of every notification, in order; `None` once the
    /// connection is gone.
    tx: broadcast::Sender<Option<Arc<str>>>,
    /// Set when the connection ended: the next [`Pg::listen`] opens a new one.
    closed: Arc<AtomicBool>,
    /// Keeps the connection open; it closes once every listener and clone is gone.
    _client: tokio_postgres::Client,
}

/// Notifications for one election.
struct Listener {
    election: String,
    rx: broadcast::Receiver<Option<Arc<str>>>,
    notifications: Arc<Notifications>,
}

impl Listener {
    /// Wait for a notification of this election or `timeout`; fails if the connection is
    /// gone.
    async fn wait(&mut self, timeout: Duration) -> Result<()> {
        let closed = || Error::Unavailable("postgres: the LISTEN connection closed".into());
        if self.notifications.closed.load(Ordering::SeqCst) {
            return Err(closed());
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                r = self.rx.recv() => match r {
                    Ok(Some(e)) if *e == *self.election => {
                        // Coalesce a burst (a `None` in it is seen by the next wait, through
                        // the flag).
                        while self.rx.try_recv().is_ok() {}
                        return Ok(());
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(broadcast::error::RecvError::Closed) => return Err(closed()),
                    // Some were missed: one of them may have been ours, so check.
                    Err(broadcast::error::RecvError::Lagged(_)) => return Ok(()),
                },
                _ = &mut deadline => return Ok(()),
            }
        }
    }
}

fn wait_for(lease: &Lease) -> Duration {
    match lease.remaining {
        Some(r) => (r + Duration::from_millis(5)).min(MAX_WAIT),
        None => MAX_WAIT,
    }
}

impl Pg {
    pub async fn connect(url: &str) -> Result<Pg> {
        let (config, tls) = parse_url(url)?;
        let (client, conn) = config.connect(tls.clone()).await.map_err(map)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client.batch_execute(SCHEMA).await.map_err(map)?;
        Ok(Pg {
            config: Arc::new(config),
            tls,
            client: Arc::new(Mutex::new(client)),
            notifications: Arc::default(),
        })
    }

    /// The connection, opened again first if the server closed it (restarted, or the
    /// session terminated by an administrator): a call that met the broken connection
    /// failed with [`Error::Unavailable`], and the next one finds a new connection.
    async fn conn(&self) -> Result<tokio::sync::MutexGuard<'_, tokio_postgres::Client>> {
        let mut client = self.client.lock().await;
        if client.is_closed() {
            let (fresh, conn) = self.config.connect(self.tls.clone()).await.map_err(map)?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            *client = fresh;
        }
        Ok(client)
    }

    /// Start listening for `election`'s notifications: every one sent after this returns is
    /// seen by the listener.
    async fn listen(&self, election: &str) -> Result<Listener> {
        let mut slot = self.notifications.lock().await;
        let notifications = match &*slot {
            Some(n) if !n.closed.load(Ordering::SeqCst) => n.clone(),
            _ => {
                let n = Arc::new(self.open_notifications().await?);
                *slot = Some(n.clone());
                n
            }
        };
        Ok(Listener {
            election: election.to_string(),
            rx: notifications.tx.subscribe(),
            notifications,
        })
    }

    /// Open the `LISTEN` connection and forward its notifications.
    async fn open_notifications(&self) -> Result<Notifications> {
        let (client, mut conn) = self.config.connect(self.tls.clone()).await.map_err(map)?;
        let (tx, _) = broadcast::channel(NOTIFICATIONS_BUFFERED_MAX);
        let closed = Arc::new(AtomicBool::new(false));
        {
            let (tx, closed) = (tx.clone(), closed.clone());
            tokio::spawn(async move {
                loop {
                    match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                        Some(Ok(AsyncMessage::Notification(n))) => {
                            if n.channel() == CHANNEL {
                                let _ = tx.send(Some(n.payload().into()));
                            }
                        }
                        Some(Ok(_)) => {}
                        // Closed (every handle is gone) or failed.
                        _ => break,
                    }
                }
                closed.store(true, Ordering::SeqCst);
                let _ = tx.send(None);
            });
        }
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(map)?;
        Ok(Notifications {
            tx,
            closed,
            _client: client,
        })
    }

    /// Renew: true if acknowledged, false if the session is gone.
    async fn keepalive(&self, session: u64) -> Result<bool> {
        let c = self.conn().await?;
        let n = c
            .execute(
                "UPDATE tenure_pg_session \
                 SET expires_at = now() + ttl_ms * interval '1 millisecond' \
                 WHERE id = $1 AND expires_at > now()",
                &[&(session as i64)],
            )
            .await
            .map_err(map)?;
        Ok(n == 1)
    }

    /// Whether `session` is still a live candidate in `election`.
    async fn is_candidate(&self, election: &str, session: u64) -> Result<bool> {
        let c = self.conn().await?;
        let rows = c
            .query(
                "SELECT 1 FROM tenure_pg_candidate c JOIN tenure_pg_session s \
                 ON s.id = c.session \
                 WHERE c.election = $1 AND c.session = $2 AND s.expires_at > now()",
                &[&election, &(session as i64)],
            )
            .await
            .map_err(map)?;
        Ok(!rows.is_empty())
    }

    /// Judge the election's lease by the database clock and hand it to the oldest live
    /// candidate if its holder is gone. `None` if nobody ever campaigned in `election`.
    async fn advance(&self, election: &str) -> Result<Option<Lease>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await.map_err(map)?;
        let lease = Pg::judge(&tx, election).await?;
        tx.commit().await.map_err(map)?;
        Ok(lease)
    }

    /// Writes `value` at `key` (`None`: removes it) if `fence` may, by
    /// [`tenure_core::sm::check_fence`] against the lease as judged now; the write's
    /// position and whether the key existed.
    async fn fenced_write(
        &self,
        key: &str,
        value: Option<&[u8]>,
        fence: Fence<'_>,
    ) -> Result<(u64, bool)> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await.map_err(map)?;
        let latest = match Pg::judge(&tx, fence.election).await? {
            Some(_) => {
                let row = tx
                    .query_one(
                        "SELECT epoch FROM tenure_pg_lease WHERE election = $1",
                        &[&fence.election],
                    )
                    .await
                    .map_err(map)?;
                Some(row.get::<_, i64>(0) as u64)
            }
            None => None,
        };
        let bound = tx
            .query_opt(
                "SELECT election, token FROM tenure_pg_key WHERE key = $1 FOR UPDATE",
                &[&key],
            )
            .await
            .map_err(map)?
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64));
        let verdict = tenure_core::sm::check_fence(
            key,
            fence.election,
            fence.token,
            latest,
            bound.as_ref().map(|(e, t)| (e.as_str(), *t)),
            false,
        );
        if let Err(e) = verdict {
            // What the judge changed stands; nothing else was written.
            tx.commit().await.map_err(map)?;
            return Err(e.into());
        }
        let token = fence.token as i64;
        let done = match value {
            Some(v) => {
                let row = tx
                    .query_one(
                        "INSERT INTO tenure_pg_key (key, election, token, value, position) \
                         VALUES ($1, $2, $3, $4, nextval('tenure_pg_key_position')) \
                         ON CONFLICT (key) DO UPDATE SET election = EXCLUDED.election, \
                         token = EXCLUDED.token, value = EXCLUDED.value, \
                         position = EXCLUDED.position RETURNING position",
                        &[&key, &fence.election, &token, &v],
                    )
                    .await
                    .map_err(map)?;
                (row.get::<_, i64>(0) as u64, bound.is_some())
            }
            None => {
                let n = tx
                    .execute("DELETE FROM tenure_pg_key WHERE key = $1", &[&key])
                    .await
                    .map_err(map)?;
                (0, n == 1)
            }
        };
        tx.commit().await.map_err(map)?;
        Ok(done)
    }

    /// [`Pg::advance`] inside `tx` (the lease row locked until `tx` ends), which the
    /// caller commits.
    async fn judge(tx: &tokio_postgres::Transaction<'_>, election: &str) -> Result<Option<Lease>> {
        let Some(row) = tx
            .query_opt(
                "SELECT holder, value, epoch, version FROM tenure_pg_lease \
                 WHERE election = $1 FOR UPDATE",
                &[&election],
            )
            .await
            .map_err(map)?
        else {
            return Ok(None);
        };
        let holder: Option<i64> = row.get(0);
        let value: Option<Vec<u8>> = row.get(1);
        let epoch: i64 = row.get(2);
        let version: i64 = row.get(3);
        // Drop candidacies whose session is gone (or expired by the database clock).
        tx.execute(
            "DELETE FROM tenure_pg_candidate c WHERE c.election = $1 AND NOT EXISTS \
             (SELECT 1 FROM tenure_pg_session s WHERE s.id = c.session AND s.expires_at > now())",
            &[&election],
        )
        .await
        .map_err(map)?;
        if let Some(h) = holder {
            let live = tx
                .query_opt(
                    "SELECT (extract(epoch FROM s.expires_at - now()) * 1000)::bigint \
                     FROM tenure_pg_candidate c JOIN tenure_pg_session s ON s.id = c.session \
                     WHERE c.election = $1 AND c.session = $2 AND s.expires_at > now()",
                    &[&election, &h],
                )
                .await
                .map_err(map)?;
            if let Some(live) = live {
                let ms: i64 = live.get(0);
                return Ok(Some(Lease {
                    leader: Some(LeaderInfo {
                        session: h as u64,
                        value: value.unwrap_or_default(),
                        token: epoch as u64,
                    }),
                    version,
                    remaining: Some(Duration::from_millis(ms.max(0) as u64)),
                }));
            }
        }
        let next = tx
            .query_opt(
                "SELECT c.session, c.value, \
                 (extract(epoch FROM s.expires_at - now()) * 1000)::bigint \
                 FROM tenure_pg_candidate c JOIN tenure_pg_session s ON s.id = c.session \
                 WHERE c.election = $1 AND s.expires_at > now() ORDER BY c.joined LIMIT 1",
                &[&election],
            )
            .await
            .map_err(map)?;
        let lease = match next {
            Some(n) => {
                let s: i64 = n.get(0);
                let v: Vec<u8> = n.get(1);
                let ms: i64 = n.get(2);
                Lease {
                    leader: Some(LeaderInfo {
                        session: s as u64,
                        value: v,
                        token: (epoch + 1) as u64,
                    }),
                    version: version + 1,
                    remaining: Some(Duration::from_millis(ms.max(0) as u64)),
                }
            }
            None if holder.is_none() => {
                return Ok(Some(Lease {
                    leader: None,
                    version,
                    remaining: None,
                }));
            }
            None => Lease {
                leader: None,
                version: version + 1,
                remaining: None,
            },
        };
        let (h, v, e) = match &lease.leader {
            Some(l) => (Some(l.session as i64), Some(l.value.clone()), epoch + 1),
            None => (None, None, epoch),
        };
        tx.execute(
            "UPDATE tenure_pg_lease SET holder = $2, value = $3, epoch = $4, version = $5 \
             WHERE election = $1",
            &[&election, &h, &v, &e, &lease.version],
        )
        .await
        .map_err(map)?;
        tx.execute(
            "INSERT INTO tenure_pg_change (election, version, holder, value, epoch) \
             VALUES ($1, $2, $3, $4, $5)",
            &[&election, &lease.version, &h, &v, &e],
        )
        .await
        .map_err(map)?;
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &election])
            .await
            .map_err(map)?;
        Ok(Some(lease))
    }

    /// Changes of `election` after `version`, in order.
    async fn changes(
        &self,
        election: &str,
        version: i64,
    ) -> Result<Vec<(i64, Option<LeaderInfo>)>> {
        let c = self.conn().await?;
        let rows = c
            .query(
                "SELECT version, holder, value, epoch FROM tenure_pg_change \
                 WHERE election = $1 AND version > $2 ORDER BY version",
                &[&election, &version],
            )
            .await
            .map_err(map)?;
        Ok(rows
            .iter()
            .map(|r| {
                let holder: Option<i64> = r.get(1);
                let value: Option<Vec<u8>> = r.get(2);
                let epoch: i64 = r.get(3);
                (
                    r.get(0),
                    holder.map(|h| LeaderInfo {
                        session: h as u64,
                        value: value.unwrap_or_default(),
                        token: epoch as u64,
                    }),
                )
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl Backend for Pg {
    fn capabilities(&self) -> Capabilities {
        // LISTEN/NOTIFY wakes every listener (DESIGN.md's "Backends" table); the lease goes to
        // the oldest live candidate.
        Capabilities::recipe("postgres", false)
    }

    async fn fenced_put(&self, key: &str, value: &[u8], fence: Fence<'_>) -> Result<u64> {
        kv::check_request(key, Some(value), fence)?;
        Ok(self.fenced_write(key, Some(value), fence).await?.0)
    }

    async fn fenced_delete(&self, key: &str, fence: Fence<'_>) -> Result<bool> {
        kv::check_request(key, None, fence)?;
        Ok(self.fenced_write(key, None, fence).await?.1)
    }

    async fn get(&self, key: &str) -> Result<Option<FencedValue>> {
        kv::check_get(key)?;
        let c = self.conn().await?;
        let row = c
            .query_opt(
                "SELECT value, election, token, position FROM tenure_pg_key WHERE key = $1",
                &[&key],
            )
            .await
            .map_err(map)?;
        Ok(row.map(|r| FencedValue {
            value: r.get(0),
            election: r.get(1),
            token: r.get::<_, i64>(2) as u64,
            index: r.get::<_, i64>(3) as u64,
        }))
    }

    fn spawn_keepalive(&self, session: Arc<Session>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(keepalive_loop(self.clone(), session))
    }

    async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
        let ms = i64::try_from(ttl.as_millis())
            .map_err(|_| Error::InvalidArgument(format!("ttl {ttl:?} is too long")))?;
        let c = self.conn().await?;
        let row = c
            .query_one(
                "INSERT INTO tenure_pg_session (ttl_ms, expires_at) \
                 VALUES ($1, now() + $1::bigint * interval '1 millisecond') RETURNING id",
                &[&ms],
            )
            .await
            .map_err(map)?;
        let id: i64 = row.get(0);
        Ok((id as u64, ttl))
    }

    async fn revoke(&self, session: u64) -> Result<()> {
        let elections: Vec<String> = {
            let c = self.conn().await?;
            let rows = c
                .query(
                    "DELETE FROM tenure_pg_candidate WHERE session = $1 RETURNING election",
                    &[&(session as i64)],
                )
                .await
                .map_err(map)?;
            c.execute(
                "DELETE FROM tenure_pg_session WHERE id = $1",
                &[&(session as i64)],
            )
            .await
            .map_err(map)?;
            rows.iter().map(|r| r.get(0)).collect()
        };
        for e in elections {
            self.advance(&e).await?;
        }
        Ok(())
    }

    async fn resign(&self, election: &str, session: u64) -> Result<()> {
        check_election(election)?;
        {
            let c = self.conn().await?;
            c.execute(
                "DELETE FROM tenure_pg_candidate WHERE election = $1 AND session = $2",
                &[&election, &(session as i64)],
            )
            .await
            .map_err(map)?;
        }
        self.advance(election).await?;
        Ok(())
    }

    /// Record the candidacy (idempotent) while the session lives.
    async fn join(&self, election: &str, session: u64, value: &[u8]) -> Result<Option<u64>> {
        check_election(election)?;
        {
            let c = self.conn().await?;
            c.execute(
                "INSERT INTO tenure_pg_lease (election, holder, value, epoch, version) \
                 VALUES ($1, NULL, NULL, 0, 0) ON CONFLICT (election) DO NOTHING",
                &[&election],
            )
            .await
            .map_err(map)?;
            let rows = c
                .query(
                    "INSERT INTO tenure_pg_candidate (election, session, value) \
                     SELECT $1, id, $3 FROM tenure_pg_session \
                     WHERE id = $2 AND expires_at > now() \
                     ON CONFLICT (election, session) DO UPDATE \
                     SET value = tenure_pg_candidate.value RETURNING joined",
                    &[&election, &(session as i64), &value],
                )
                .await
                .map_err(map)?;
            if rows.is_empty() {
                return Err(Error::SessionLost);
            }
        }
        self.advance(election).await?;
        Ok(None)
    }

    /// Record the candidacy and wait until it leads; returns its token.
    async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
        check_election(election)?;
        let mut listener = self.listen(election).await?;
        self.join(election, session, value).await?;
        loop {
            let lease = self
                .advance(election)
                .await?
                .ok_or_else(|| Error::UnknownElection(election.to_string()))?;
            if let Some(l) = &lease.leader {
                if l.session == session {
                    return Ok(l.token);
                }
            }
            if !self.is_candidate(election, session).await? {
                return Err(Error::SessionLost);
            }
            listener.wait(wait_for(&lease)).await?;
            crate::note_waiter_wakeup();
        }
    }

    async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        check_election(election)?;
        match self.advance(election).await? {
            Some(l) => Ok(l.leader),
            None => Err(Error::UnknownElection(election.to_string())),
        }
    }

    async fn observe(&self, election: &str, tx: mpsc::Sender<Result<LeaderEvent>>) -> Result<()> {
        check_election(election)?;
        let mut listener = self.listen(election).await?;
        let lease = self
            .advance(election)
            .await?
            .ok_or_else(|| Error::UnknownElection(election.to_string()))?;
        let election = election.to_string();
        let first = LeaderEvent {
            election: election.clone(),
            leader: lease.leader.clone(),
            index: lease.version as u64,
        };
        if tx.send(Ok(first)).await.is_err() {
            return Ok(());
        }
        let pg = self.clone();
        tokio::spawn(async move {
            let mut version = lease.version;
            let mut wait = wait_for(&lease);
            loop {
                let r = tokio::select! {
                    r = listener.wait(wait) => r,
                    _ = tx.closed() => return,
                };
                let step = async {
                    r?;
                    let lease = pg.advance(&election).await?;
                    let changes = pg.changes(&election, version).await?;
                    Ok::<_, Error>((lease, changes))
                };
                let (lease, changes) = match step.await {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                if let Some(l) = &lease {
                    wait = wait_for(l);
                }
                for (v, leader) in changes {
                    version = v;
                    let ev = LeaderEvent {
                        election: election.clone(),
                        leader,
                        index: v as u64,
                    };
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(())
    }
}

/// Renew `session` every TTL/4 until the task is stopped or the session is gone.
pub(crate) async fn keepalive_loop(pg: Pg, session: Arc<Session>) {
    let every = session.ttl / 4;
    loop {
        tokio::time::sleep(every).await;
        let sent = Instant::now();
        match pg.keepalive(session.id).await {
            Ok(true) => session.acked(sent, session.ttl),
            Ok(false) => {
                session.end();
                return;
            }
            Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
        }
    }
}
