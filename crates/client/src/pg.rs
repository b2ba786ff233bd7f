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
//! - Waiters `LISTEN` on their own connection and also re-check when the holder's session
//!   could have expired (an expired holder sends no notification).
//!
//! Not supported: [`crate::Leadership::transfer`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Mutex};
use tokio_postgres::{AsyncMessage, NoTls};

use crate::session::Session;
use crate::{Error, LeaderEvent, LeaderInfo, Result};

/// The notification channel; the payload is the election.
const CHANNEL: &str = "tenure_pg";
/// Longest wait between two checks of an election while waiting.
const MAX_WAIT: Duration = Duration::from_secs(1);
/// Pause before retrying a failed keepalive.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

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
    url: Arc<str>,
    /// Transactions need the connection to themselves.
    client: Arc<Mutex<tokio_postgres::Client>>,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pg").finish_non_exhaustive()
    }
}

fn map(e: tokio_postgres::Error) -> Error {
    if e.is_closed() || e.as_db_error().is_none() {
        Error::Unavailable(format!("postgres: {e}"))
    } else {
        Error::Backend(format!("postgres: {e}"))
    }
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

/// Notifications for one election on a connection of its own.
struct Listener {
    rx: mpsc::UnboundedReceiver<()>,
    _client: tokio_postgres::Client,
}

impl Listener {
    /// Wait for a notification or `timeout`; fails if the connection is gone.
    async fn wait(&mut self, timeout: Duration) -> Result<()> {
        tokio::select! {
            r = self.rx.recv() => match r {
                Some(()) => {
                    // Coalesce a burst.
                    while self.rx.try_recv().is_ok() {}
                    Ok(())
                }
                None => Err(Error::Unavailable("postgres: the LISTEN connection closed".into())),
            },
            _ = tokio::time::sleep(timeout) => Ok(()),
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
        let (client, conn) =
            tokio_postgres::connect(url, NoTls)
                .await
                .map_err(|e| match e.as_db_error() {
                    Some(_) => map(e),
                    None => Error::Unavailable(format!("postgres: {e}")),
                })?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client.batch_execute(SCHEMA).await.map_err(map)?;
        Ok(Pg {
            url: url.into(),
            client: Arc::new(Mutex::new(client)),
        })
    }

    async fn listen(&self, election: &str) -> Result<Listener> {
        let (client, mut conn) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .map_err(map)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let election = election.to_string();
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    m = std::future::poll_fn(|cx| conn.poll_message(cx)) => m,
                    _ = tx.closed() => return,
                };
                match msg {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        if n.channel() == CHANNEL && n.payload() == election {
                            let _ = tx.send(());
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => return,
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(map)?;
        Ok(Listener {
            rx,
            _client: client,
        })
    }

    pub async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
        let ms = i64::try_from(ttl.as_millis())
            .map_err(|_| Error::InvalidArgument(format!("ttl {ttl:?} is too long")))?;
        let c = self.client.lock().await;
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

    /// Renew: true if acknowledged, false if the session is gone.
    async fn keepalive(&self, session: u64) -> Result<bool> {
        let c = self.client.lock().await;
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

    pub async fn revoke(&self, session: u64) -> Result<()> {
        let elections: Vec<String> = {
            let c = self.client.lock().await;
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

    pub async fn resign(&self, election: &str, session: u64) -> Result<()> {
        check_election(election)?;
        {
            let c = self.client.lock().await;
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
    pub async fn join(&self, election: &str, session: u64, value: &[u8]) -> Result<()> {
        check_election(election)?;
        {
            let c = self.client.lock().await;
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
        Ok(())
    }

    /// Whether `session` is still a live candidate in `election`.
    async fn is_candidate(&self, election: &str, session: u64) -> Result<bool> {
        let c = self.client.lock().await;
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

    /// Record the candidacy and wait until it leads; returns its token.
    pub async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
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

    /// Judge the election's lease by the database clock and hand it to the oldest live
    /// candidate if its holder is gone. `None` if nobody ever campaigned in `election`.
    async fn advance(&self, election: &str) -> Result<Option<Lease>> {
        let mut c = self.client.lock().await;
        let tx = c.transaction().await.map_err(map)?;
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
                tx.commit().await.map_err(map)?;
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
                tx.commit().await.map_err(map)?;
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
        tx.commit().await.map_err(map)?;
        Ok(Some(lease))
    }

    pub async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        check_election(election)?;
        match self.advance(election).await? {
            Some(l) => Ok(l.leader),
            None => Err(Error::UnknownElection(election.to_string())),
        }
    }

    /// Changes of `election` after `version`, in order.
    async fn changes(
        &self,
        election: &str,
        version: i64,
    ) -> Result<Vec<(i64, Option<LeaderInfo>)>> {
        let c = self.client.lock().await;
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

    pub async fn observe(
        &self,
        election: &str,
        tx: mpsc::Sender<Result<LeaderEvent>>,
    ) -> Result<()> {
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
