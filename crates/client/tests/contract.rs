//! The election contract, as one `#[test]` per case per backend: `memory:`, a real 3-node
//! tenure cluster of `tenure server` child processes (the workspace's harness,
//! `tenure-testkit`: TLS and client authentication on), a real single-node etcd started by
//! `scripts/services.sh start-etcd`, a real PostgreSQL started by `scripts/services.sh
//! start-postgres`, and a real standalone ZooKeeper started by `scripts/services.sh
//! start-zookeeper`, and three embedded nodes in the test's own process (`embedded:`,
//! `tenure::embedded`) (install the servers with `scripts/services.sh install-etcd`,
//! `install-postgres`, `install-zookeeper`; a case fails, never skips, without its server).
//! Each backend's server is started by the first case that needs it and shared by the
//! cases that run meanwhile (each campaigns in elections named after itself); the last of
//! them stops it and removes its directory. Under `cargo test` a backend's cases run side
//! by side and share one server (the harness's clusters hold a lock, one at a time, for
//! their lifetime: a server is never kept past its cases); under `cargo nextest` each case
//! is a process of its own, with its own server. Either way one failure never hides
//! another case.
//!
//! `contract_for!` writes the cases for one backend:
//! `cargo test -p tenure --test contract zookeeper::` runs ZooKeeper's alone.
//!
//! **Capabilities.** A case that a backend cannot meet by its nature checks the refusal
//! instead, through an explicit capability asked from the client:
//! [`Client::supports_transfer`] (etcd's and ZooKeeper's recipes and the PostgreSQL lease
//! row have no hand-over to a named candidate: `transfer` must be refused with
//! [`Error::UnsupportedBackend`], changing nothing) and [`Client::wakes_only_next`] (false
//! for PostgreSQL, whose LISTEN/NOTIFY wakes every waiter, and for `memory:`, whose waiters
//! all re-check on every change: there the herd case checks that one change elects exactly
//! one waiter, and does not count wake-ups).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure::{CampaignOptions, Client, Error, LeaderEvent, Lost};
use tokio_stream::StreamExt as _;

#[path = "common/replicas.rs"]
mod replicas;
use replicas::{raft_ready, Replicas};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn opts(ttl: Duration) -> CampaignOptions {
    CampaignOptions {
        ttl,
        ..Default::default()
    }
}

// ------------------------------------------------------------------------------------------
// The contract: one function per case, of a backend URL and a fresh election name.

/// The cases for one backend: `mod $backend` with one `#[test]` per case, every case
/// against the URL of `$shared()` (a [`Shared`] server).
macro_rules! contract_for {
    ($backend:ident, $shared:path) => {
        mod $backend {
            use super::*;

            macro_rules! case {
                ($case:ident) => {
                    #[test]
                    fn $case() {
                        run_case(&$shared(), stringify!($case), super::$case);
                    }
                };
            }

            case!(one_leader_among_five);
            case!(crashed_holder_is_replaced_within_ttl);
            case!(resign_hands_over_at_once);
            case!(tokens_strictly_increase);
            case!(observe_sees_every_change_in_order);
            case!(frozen_holder_stops_believing_first);
            case!(transfer_hands_to_a_named_candidate_or_is_refused_where_unsupported);
            case!(errors_are_typed);
            case!(one_change_elects_one_waiter_and_wakes_only_it_where_promised);
            case!(fenced_keys_follow_the_token);
            case!(a_lapsed_holders_ledger_record_is_refused_and_its_claim_handed_on);
            case!(a_write_in_flight_when_leadership_passes_is_refused);
            case!(credentials_stay_hidden);
        }
    };
}

contract_for!(memory, shared_memory);
contract_for!(cluster, shared_cluster);
contract_for!(etcd, shared_etcd);
contract_for!(postgres, shared_postgres);
contract_for!(zookeeper, shared_zookeeper);
contract_for!(embedded, shared_embedded);

/// Run `case` against `shared`'s URL in a runtime of its own, with an election named after
/// the case; then check that the server logged no password.
fn run_case<F, Fut>(shared: &Shared, name: &str, case: F)
where
    F: FnOnce(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let shown = tenure::redact_url(&shared.url);
    eprintln!("contract {shown}: {name} ...");
    let started = Instant::now();
    runtime().block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            case(shared.url.clone(), name.to_string()),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} did not finish within 60 s on {shown}"))
    });
    eprintln!("contract {shown}: {name} ok in {:?}", started.elapsed());
    if let Some(dir) = &shared.logs {
        assert_no_password_in_logs(dir);
    }
}

async fn one_leader_among_five(url: String, election: String) {
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(Client::connect(&url).await.expect("connect"));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let tx = tx.clone();
        let election = election.clone();
        tasks.push(tokio::spawn(async move {
            let l = c
                .campaign(&election, format!("c{i}").as_bytes(), opts(ms(2000)))
                .await
                .expect("campaign");
            let _ = tx.send((i, l.token(), l.session()));
            // Hold leadership until aborted.
            std::future::pending::<()>().await;
            drop(l);
        }));
    }
    let (winner, token, session) = tokio::time::timeout(ms(5000), rx.recv())
        .await
        .expect("someone leads within 5 s")
        .expect("a winner");
    // Nobody else is told they lead while the winner holds.
    tokio::time::sleep(ms(500)).await;
    assert!(rx.try_recv().is_err(), "a second leader among five");
    let leader = Client::connect(&url)
        .await
        .expect("connect")
        .leader(&election)
        .await
        .expect("leader")
        .expect("someone leads");
    assert_eq!((leader.session, leader.token), (session, token));
    assert_eq!(leader.value, format!("c{winner}").into_bytes());
    for t in tasks {
        t.abort();
    }
}

async fn crashed_holder_is_replaced_within_ttl(url: String, election: String) {
    let ttl = ms(800);
    let a = Client::connect(&url).await.expect("connect");
    let b = Client::connect(&url).await.expect("connect");
    let holder = leads_as_a(&a, &election, ttl).await;
    let standby = b.join(&election, b"b", opts(ttl)).await.expect("b joins");
    // The crash: keepalives stop, nothing is resigned or revoked.
    holder.stop_keepalives();
    // No renewal moves it any more: the crashed holder believes it leads until then.
    let believed_until = holder.valid_until();
    let next = tokio::time::timeout(ttl + ms(1000), standby.leadership())
        .await
        .expect("a new leader within TTL + 1 s")
        .expect("b leads");
    let replaced_at = Instant::now();
    assert!(next.token() > holder.token());
    // DESIGN rule 4: the successor leads only after the crashed holder stopped believing
    // (its last acknowledged keepalive's send time + TTL − margin), however long ago that
    // keepalive was sent. (Measuring from the moment keepalives stopped is wrong: the last
    // renewal may be older than that by up to a keepalive interval, or by a slow `join`.)
    assert!(
        replaced_at >= believed_until,
        "replaced {:?} before the crashed holder stopped believing",
        believed_until - replaced_at
    );
    assert!(!holder.is_valid());
    // Its lease ran out first; by now it may also have observed its successor.
    assert!(matches!(
        holder.lost().await,
        Lost::Expired | Lost::Replaced
    ));
}

/// `c` campaigns with the value `a` and leads.
async fn leads_as_a(c: &Client, election: &str, ttl: Duration) -> tenure::Leadership {
    c.campaign(election, b"a", opts(ttl))
        .await
        .expect("a leads")
}

async fn resign_hands_over_at_once(url: String, election: String) {
    // A long TTL, so that a hand-over through expiry would be obvious.
    let ttl = ms(5000);
    let c = Client::connect(&url).await.expect("connect");
    let first = leads_as_a(&c, &election, ttl).await;
    let standby = c.join(&election, b"b", opts(ttl)).await.expect("b joins");
    let first_token = first.token();
    let resigned = Instant::now();
    first.resign().await.expect("resign");
    let next = standby.leadership().await.expect("b leads");
    assert!(
        resigned.elapsed() < ms(1000),
        "hand-over took {:?}",
        resigned.elapsed()
    );
    assert!(next.token() > first_token);
    assert!(next.is_valid());
}

async fn tokens_strictly_increase(url: String, election: String) {
    let c = Client::connect(&url).await.expect("connect");
    let mut last = 0;
    for i in 0..50 {
        let l = c
            .campaign(&election, format!("{i}").as_bytes(), opts(ms(2000)))
            .await
            .expect("campaign");
        assert!(l.token() > last, "token {} after {last}", l.token());
        last = l.token();
        l.resign().await.expect("resign");
    }
}

async fn observe_sees_every_change_in_order(url: String, election: String) {
    let ttl = ms(5000);
    let c = Client::connect(&url).await.expect("connect");
    let a = leads_as_a(&c, &election, ttl).await;
    let mut changes = c.observe(&election).await.expect("observe");
    let b = c.join(&election, b"b", opts(ttl)).await.expect("b joins");
    let d = c.join(&election, b"d", opts(ttl)).await.expect("d joins");
    let mut expected = vec![(a.session(), a.token())];
    a.resign().await.expect("a resigns");
    let b = b.leadership().await.expect("b leads");
    expected.push((b.session(), b.token()));
    b.resign().await.expect("b resigns");
    let d = d.leadership().await.expect("d leads");
    expected.push((d.session(), d.token()));
    d.resign().await.expect("d resigns");
    let mut seen: Vec<LeaderEvent> = Vec::new();
    while seen.len() < 4 {
        let ev = tokio::time::timeout(ms(2000), changes.next())
            .await
            .expect("an event within 2 s")
            .expect("the stream goes on")
            .expect("an event");
        seen.push(ev);
    }
    let got: Vec<Option<(u64, u64)>> = seen
        .iter()
        .map(|e| e.leader.as_ref().map(|l| (l.session, l.token)))
        .collect();
    let mut want: Vec<Option<(u64, u64)>> = expected.into_iter().map(Some).collect();
    want.push(None);
    assert_eq!(got, want);
    assert!(seen.windows(2).all(|w| w[0].index < w[1].index));
    assert!(seen.iter().all(|e| e.election == election));
}

async fn frozen_holder_stops_believing_first(url: String, election: String) {
    let ttl = ms(1000);
    let c = Client::connect(&url).await.expect("connect");
    let frozen = leads_as_a(&c, &election, ttl).await;
    let standby = c.join(&election, b"b", opts(ttl)).await.expect("b joins");
    // Freeze once a keepalive has been acknowledged (the lease moved past the grant's).
    let granted = frozen.valid_until();
    let deadline = Instant::now() + ttl;
    while frozen.valid_until() == granted {
        assert!(
            Instant::now() < deadline,
            "no keepalive acknowledged within the TTL"
        );
        tokio::time::sleep(ms(10)).await;
    }
    frozen.stop_keepalives();
    let until = frozen.valid_until();
    let watch_frozen = async {
        let why = frozen.lost().await;
        (Instant::now(), why)
    };
    let (next, (stopped_at, why)) = tokio::join!(standby.leadership(), watch_frozen);
    let granted_seen = Instant::now();
    let next = next.expect("b leads");
    assert_eq!(why, Lost::Expired);
    assert!(
        until < granted_seen && stopped_at <= granted_seen,
        "the frozen holder believed until {:?} after b was granted",
        until.saturating_duration_since(granted_seen)
    );
    assert!(!frozen.is_valid());
    assert!(next.token() > frozen.token());
}

/// Where [`Client::supports_transfer`]: the leader hands over to a named candidate (not
/// the next in line), whose token is higher. Elsewhere: `transfer` is refused with
/// [`Error::UnsupportedBackend`] and nothing changes.
async fn transfer_hands_to_a_named_candidate_or_is_refused_where_unsupported(
    url: String,
    election: String,
) {
    let ttl = ms(5000);
    let c = Client::connect(&url).await.expect("connect");
    let a = leads_as_a(&c, &election, ttl).await;
    let b = c.join(&election, b"b", opts(ttl)).await.expect("b joins");
    let d = c.join(&election, b"d", opts(ttl)).await.expect("d joins");
    if !c.supports_transfer() {
        assert!(matches!(
            a.transfer(d.session()).await,
            Err(Error::UnsupportedBackend { .. })
        ));
        // Nothing changed: a still leads.
        assert!(a.is_valid());
        let now = c.leader(&election).await.expect("leader").expect("a leads");
        assert_eq!((now.session, now.token), (a.session(), a.token()));
        return;
    }
    let token = a.transfer(d.session()).await.expect("transfer");
    let d = d.leadership().await.expect("d leads");
    assert_eq!(d.token(), token);
    assert!(token > a.token());
    assert_eq!(a.lost().await, Lost::Replaced);
    assert!(!a.is_valid());
    drop(b);
}

async fn errors_are_typed(url: String, election: String) {
    let c = Client::connect(&url).await.expect("connect");
    let unknown = format!("{election}-never");
    assert!(matches!(
        c.leader(&unknown).await,
        Err(Error::UnknownElection(_))
    ));
    assert!(matches!(
        c.observe(&unknown).await.map(|_| ()),
        Err(Error::UnknownElection(_))
    ));
    assert!(matches!(
        c.campaign("", b"x", opts(ms(1000))).await.map(|_| ()),
        Err(Error::InvalidArgument(_))
    ));
    let too_short = c.campaign(&election, b"x", opts(ms(1))).await.map(|_| ());
    assert!(
        matches!(&too_short, Err(Error::InvalidArgument(_))),
        "{too_short:?}"
    );
    // Said once: "invalid argument: ttl …", never "invalid argument: invalid argument: …",
    // also when the cluster is the one refusing (below its 100 ms minimum TTL, above the
    // client's own floor).
    let said = too_short.unwrap_err().to_string();
    assert_eq!(said.matches("invalid argument").count(), 1, "{said}");
    if url.starts_with("tenure://") {
        let refused = c.campaign(&election, b"x", opts(ms(50))).await.map(|_| ());
        let said = match refused {
            Err(e @ Error::InvalidArgument(_)) => e.to_string(),
            other => panic!("a 50 ms TTL: {other:?}"),
        };
        assert_eq!(said.matches("invalid argument").count(), 1, "{said}");
    }
    for url in ["consul://localhost:8500"] {
        assert!(matches!(
            Client::connect(url).await,
            Err(Error::UnsupportedBackend { .. })
        ));
    }
}

/// A fenced key takes its election leader's writes and refuses, changing nothing, a
/// replaced leader's token, a token never issued, another election's leader and an empty
/// key; a delete is fenced the same way.
async fn fenced_keys_follow_the_token(url: String, election: String) {
    let ttl = ms(5000);
    let c = Client::connect(&url).await.expect("connect");
    let key = format!("{election}/config");
    assert_eq!(c.get(&key).await.expect("get"), None, "never written");
    let first = leads_as_a(&c, &election, ttl).await;
    let old = first.token();
    let index = c
        .fenced_put(&key, b"v1", &election, old)
        .await
        .expect("the leader writes");
    let stored = c.get(&key).await.expect("get").expect("stored");
    assert_eq!(
        (
            stored.value.as_slice(),
            stored.election.as_str(),
            stored.token,
            stored.index
        ),
        (&b"v1"[..], election.as_str(), old, index)
    );
    first.resign().await.expect("a resigns");
    let second = c
        .campaign(&election, b"b", opts(ttl))
        .await
        .expect("b leads");
    // The replaced leader's token is refused before the new one ever wrote (superseded),
    // and so is a token the election never issued; neither changes anything.
    let stale = c.fenced_put(&key, b"late", &election, old).await;
    assert_eq!(
        stale,
        Err(Error::StaleToken {
            current: second.token()
        })
    );
    let forged = c
        .fenced_put(&key, b"forged", &election, second.token() + 100)
        .await;
    assert!(
        matches!(forged, Err(Error::TokenNotIssued(_))),
        "{forged:?}"
    );
    assert_eq!(c.get(&key).await.expect("get"), Some(stored));
    // The new leader writes through its leadership (with its session's request ids).
    let index = second.fenced_put(&key, b"v2").await.expect("b writes");
    let now = c.get(&key).await.expect("get").expect("stored");
    assert_eq!(
        (now.value.as_slice(), now.token, now.index),
        (&b"v2"[..], second.token(), index)
    );
    // The key belongs to its election: another election's leader cannot write it.
    let other = format!("{election}-other");
    let intruder = c.campaign(&other, b"x", opts(ttl)).await.expect("x leads");
    let wrong = c.fenced_put(&key, b"x", &other, intruder.token()).await;
    assert!(matches!(wrong, Err(Error::WrongElection(_))), "{wrong:?}");
    let bad = c.fenced_put("", b"x", &election, second.token()).await;
    assert!(matches!(bad, Err(Error::InvalidArgument(_))), "{bad:?}");
    assert_eq!(c.get(&key).await.expect("get"), Some(now.clone()));
    // A delete is fenced the same way: the replaced leader's is refused, the leader's lands,
    // and a second one finds nothing; the key then takes the leader's writes again.
    let stale = c.fenced_delete(&key, &election, old).await;
    assert!(matches!(stale, Err(Error::StaleToken { .. })), "{stale:?}");
    assert_eq!(c.get(&key).await.expect("get"), Some(now));
    assert_eq!(second.fenced_delete(&key).await, Ok(true));
    assert_eq!(c.get(&key).await.expect("get"), None);
    assert_eq!(second.fenced_delete(&key).await, Ok(false));
    second
        .fenced_put(&key, b"v3")
        .await
        .expect("b writes again");
    let again = c.get(&key).await.expect("get").expect("stored");
    assert_eq!(
        (again.value.as_slice(), again.token),
        (&b"v3"[..], second.token())
    );
}

/// The guarantee `tenure cron`'s ledger
/// ([`tenure::schedule`]) stands on: a holder that claimed a slot and then froze past its
/// lease while another replica waited is refused when it wakes and records the outcome
/// (by the backend's own judgement of the lapse: nobody else wrote meanwhile), and the next
/// leader finds the claim open and takes it up with the same run id.
async fn a_lapsed_holders_ledger_record_is_refused_and_its_claim_handed_on(
    url: String,
    election: String,
) {
    use tenure::schedule::{self, ledger, Ledger, Next, OnInterrupt, Schedule, State};
    let c = Client::connect(&url).await.expect("connect");
    let ttl = ms(2000);
    let key = schedule::ledger_key(&election);
    let every_second = Schedule::new("* * * * * *", "UTC").expect("a schedule");
    let a = leads_as_a(&c, &election, ttl).await;
    let start = chrono::Utc::now();
    let mut l = Ledger::new(start);
    let Next::Wait(slot) = ledger::next(&l, &every_second, start, None, OnInterrupt::Retry) else {
        panic!("a fresh ledger waits for its first slot");
    };
    l.claim(&election, slot, "a", a.token(), slot);
    a.fenced_put(&key, &l.encode())
        .await
        .expect("a claims the slot");
    // b is a candidate (its session kept alive, but nobody asks for the lease yet: the write
    // itself must see that a's lapsed); a freezes (no keepalives) past its TTL.
    let b_client = Client::connect(&url).await.expect("connect");
    let b_candidate = b_client
        .join(&election, b"b", opts(ttl))
        .await
        .expect("b joins");
    a.stop_keepalives();
    tokio::time::sleep(ttl + ms(1500)).await;
    // a wakes and records its outcome with its old token: refused, nothing written.
    let mut late = l.clone();
    late.close(State::Completed, Some(0), chrono::Utc::now());
    let refused = c
        .fenced_put(&key, &late.encode(), &election, a.token())
        .await;
    assert!(
        matches!(refused, Err(Error::StaleToken { .. })),
        "the lapsed holder's record: {refused:?}"
    );
    let b = tokio::time::timeout(ms(10_000), b_candidate.leadership())
        .await
        .expect("b leads within 10 s")
        .expect("b leads");
    assert!(
        b.token() > a.token(),
        "b {} after a {}",
        b.token(),
        a.token()
    );
    let found = schedule::history(&c, &election)
        .await
        .expect("read")
        .expect("a ledger");
    assert_eq!(found, l, "the ledger is as a claimed it");
    assert_eq!(
        ledger::next(
            &found,
            &every_second,
            chrono::Utc::now(),
            None,
            OnInterrupt::Retry
        ),
        Next::Rerun(slot),
        "the open claim comes first"
    );
    let mut taken = found.clone();
    taken.claim(&election, slot, "b", b.token(), chrono::Utc::now());
    let open = taken.open.clone().expect("claimed");
    assert_eq!(
        (open.attempt, open.run_id.as_str()),
        (2, l.open.as_ref().expect("a's").run_id.as_str())
    );
    b.fenced_put(&key, &taken.encode())
        .await
        .expect("b takes the slot up");
}

/// How long the slow client's proxy holds every chunk back in the in-flight case.
const SLOW: Duration = Duration::from_millis(150);

/// The window between a fenced write's judgement and its commit: a holder behind a slow
/// network (every byte held back [`SLOW`] each way) starts a fenced write, and its
/// resignation reaches the store after the write's last read and before its commit (timed
/// from one write measured through the same network); the next leader then takes over. The write must not land: once the next leader leads, the key
/// never changes again under the old token. (On etcd and ZooKeeper this is the
/// compare-and-set's check of the leading candidacy; a store that judges and writes in one
/// step, the cluster's or PostgreSQL's locked transaction, passes by construction.) Where
/// the backend has no network (`memory:`, embedded), the same steps run without the delay.
async fn a_write_in_flight_when_leadership_passes_is_refused(url: String, election: String) {
    let ttl = ms(10_000);
    let (slow_url, proxy) = match through_proxy(&url) {
        Some((u, p)) => (u, Some(p)),
        None => (url.clone(), None),
    };
    let a_client = Client::connect(&slow_url)
        .await
        .expect("connect through the proxy");
    let b_client = Client::connect(&url).await.expect("connect");
    let key = format!("{election}/in-flight");
    let a = leads_as_a(&a_client, &election, ttl).await;
    let token = a.token();
    a.fenced_put(&key, b"a-0").await.expect("a writes");
    let b_candidate = b_client
        .join(&election, b"b", opts(ttl))
        .await
        .expect("b joins");
    if let Some(p) = &proxy {
        p.set_delay(SLOW);
    }
    // A write through the slow network takes `took`: its last request (the commit) reaches
    // the store at `took - SLOW`, and the read before it at `took - 3 × SLOW`.
    let started = Instant::now();
    a.fenced_put(&key, b"a-1").await.expect("a writes");
    let took = started.elapsed();
    let write = {
        let (c, election, key) = (a_client.clone(), election.clone(), key.clone());
        tokio::spawn(async move { c.fenced_put(&key, b"a-late", &election, token).await })
    };
    // The resignation, sent now, reaches the store at `took - 2 × SLOW`: between the two.
    tokio::time::sleep(took.saturating_sub(3 * SLOW)).await;
    let resigned = tokio::spawn(a.resign());
    let b = tokio::time::timeout(ms(10_000), b_candidate.leadership())
        .await
        .expect("b leads within 10 s")
        .expect("b leads");
    let seen = b_client.get(&key).await.expect("get");
    let late = write.await.expect("the write's task");
    resigned.await.expect("the resign task").expect("a resigns");
    let after = b_client.get(&key).await.expect("get");
    assert_eq!(
        after.as_ref().map(|v| (v.value.as_slice(), v.token)),
        seen.as_ref().map(|v| (v.value.as_slice(), v.token)),
        "the key changed after b ({}) led; a's write in flight with token {token} answered \
         {late:?}",
        b.token()
    );
    if let Ok(index) = late {
        // Landed before b led (the store judged and wrote before the resignation): it is
        // what b saw.
        assert_eq!(seen.map(|v| (v.token, v.index)), Some((token, index)));
    }
    b.fenced_put(&key, b"b-1").await.expect("b writes");
}

/// `url` with each host's port replaced by a [`Proxy`]'s in front of it (the host names
/// stay, so TLS names still match); `None` for a URL without hosts (`memory:`,
/// `embedded:`).
fn through_proxy(url: &str) -> Option<(String, tenure_testkit::proxy::Proxy)> {
    use std::net::ToSocketAddrs as _;
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    let hosts: Vec<(&str, &str)> = hosts
        .split(',')
        .map(|h| h.rsplit_once(':').expect("HOST:PORT"))
        .collect();
    let targets: Vec<std::net::SocketAddr> = hosts
        .iter()
        .map(|(host, port)| {
            let port: u16 = port.parse().expect("a port");
            (*host, port)
                .to_socket_addrs()
                .expect("resolve")
                .find(|a| a.is_ipv4())
                .expect("an IPv4 address")
        })
        .collect();
    let proxy = tenure_testkit::proxy::Proxy::start(&targets, "");
    let proxied: Vec<String> = hosts
        .iter()
        .zip(proxy.addrs())
        .map(|((host, _), a)| format!("{host}:{}", a.port()))
        .collect();
    let tail = if scheme == "tenure" {
        // Reach the cluster only through the proxy, never at the members' own addresses.
        let sep = if tail.contains('?') { "&" } else { "?" };
        format!("{tail}{sep}discover=false")
    } else {
        tail.to_string()
    };
    Some((
        format!("{scheme}://{user}{}{tail}", proxied.join(",")),
        proxy,
    ))
}

/// Waiters queued behind the holder in the herd case.
const WAITERS: usize = 50;

/// A holder and 50 queued waiters; the holder resigns. On every backend, exactly one waiter
/// becomes leader, and the stream of changes names it. Where the backend promises to wake
/// only the next candidate ([`Client::wakes_only_next`]), exactly one waiter wake-up is
/// counted from the resignation until 300 ms after the next leader is known; elsewhere the
/// count is printed, not judged (PostgreSQL's NOTIFY and `memory:` wake every waiter).
async fn one_change_elects_one_waiter_and_wakes_only_it_where_promised(
    url: String,
    election: String,
) {
    let ttl = ms(5000);
    let h = Client::connect(&url).await.expect("connect");
    let w = Client::connect(&url).await.expect("connect");
    let holder = h
        .campaign(&election, b"holder", opts(ttl))
        .await
        .expect("the holder leads");
    let holder_session = holder.session();
    let (joined_tx, mut joined) = tokio::sync::mpsc::unbounded_channel();
    let (led_tx, mut led) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let (w, election, joined_tx, led_tx) = (
            w.clone(),
            election.clone(),
            joined_tx.clone(),
            led_tx.clone(),
        );
        waiters.push(tokio::spawn(async move {
            let value = format!("waiter-{i}");
            let candidate = w
                .join(&election, value.as_bytes(), opts(ttl))
                .await
                .expect("a waiter joins");
            let _ = joined_tx.send(());
            let leadership = candidate.leadership().await.expect("a waiter leads");
            let _ = led_tx.send(leadership.session());
            // Hold it until aborted.
            std::future::pending::<()>().await;
            drop(leadership);
        }));
    }
    for _ in 0..WAITERS {
        tokio::time::timeout(Duration::from_secs(20), joined.recv())
            .await
            .expect("the waiters join within 20 s")
            .expect("a waiter joined");
    }
    // Nothing announces that a waiter's wait (a blocked campaign, a watch, a LISTEN) has
    // reached the backend after `join` returned: give them a moment.
    tokio::time::sleep(ms(500)).await;
    let mut changes = h.observe(&election).await.expect("observe");
    let first = changes
        .next()
        .await
        .expect("the current leader")
        .expect("an event");
    assert_eq!(first.leader.map(|l| l.session), Some(holder_session));
    let before = w.waiter_wakeups();
    holder.resign().await.expect("resign");
    let next = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("a change within 10 s")
        .expect("the stream goes on")
        .expect("an event")
        .leader
        .expect("a waiter leads")
        .session;
    let winner = tokio::time::timeout(Duration::from_secs(10), led.recv())
        .await
        .expect("the new leader's waiter is told within 10 s")
        .expect("a waiter led");
    assert_eq!(
        winner, next,
        "the waiter told it leads is the leader observed"
    );
    // A window for wrong wake-ups and second leaders to show, which no event announces.
    tokio::time::sleep(ms(300)).await;
    assert!(led.try_recv().is_err(), "a second waiter was told it leads");
    let woken = w.waiter_wakeups() - before;
    println!(
        "{}: {woken} waiter wake-ups for one change among {WAITERS} waiters \
         (wakes_only_next: {})",
        tenure::redact_url(&url),
        w.wakes_only_next()
    );
    if w.wakes_only_next() {
        assert_eq!(
            woken, 1,
            "waiter wake-ups for one change on a backend that wakes only the next candidate"
        );
    }
    for t in waiters {
        t.abort();
    }
}

// ------------------------------------------------------------------------------------------
// The backends: one server each per test process, shared by the cases.

/// A backend's server, shared by the cases that run at the same time: the first case to
/// need it starts it, the last one to finish stops it (and removes its directory).
struct Shared {
    /// The URL the cases connect with (passwords included).
    url: String,
    /// Where the server writes its logs, checked for passwords after each case.
    logs: Option<PathBuf>,
    /// What keeps the server running, dropped with the last case that uses it.
    _server: std::sync::Mutex<Box<dyn std::any::Any + Send>>,
}

impl Shared {
    fn new(url: String, logs: Option<PathBuf>, server: impl Send + 'static) -> Shared {
        Shared {
            url,
            logs,
            _server: std::sync::Mutex::new(Box::new(server)),
        }
    }
}

/// The server in `slot` while some case holds it, else a new one from `start`, run on a
/// thread that outlives the case that started it (the tenure cluster's children die with
/// the thread that spawned them: PR_SET_PDEATHSIG). Other cases of the same backend wait
/// while it starts.
fn shared(
    slot: &'static std::sync::Mutex<std::sync::Weak<Shared>>,
    start: fn() -> Shared,
) -> Arc<Shared> {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(shared) = slot.upgrade() {
        return shared;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(start());
        loop {
            std::thread::park();
        }
    });
    let shared = Arc::new(
        rx.recv()
            .expect("the shared server started (see the panic above)"),
    );
    *slot = Arc::downgrade(&shared);
    shared
}

/// One slot per backend.
macro_rules! slot {
    () => {{
        static SLOT: std::sync::Mutex<std::sync::Weak<Shared>> =
            std::sync::Mutex::new(std::sync::Weak::new());
        &SLOT
    }};
}

fn shared_memory() -> Arc<Shared> {
    shared(slot!(), || Shared::new("memory:contract".into(), None, ()))
}

fn shared_cluster() -> Arc<Shared> {
    shared(slot!(), || {
        let cluster = Cluster::start(3);
        let url = cluster.url();
        runtime().block_on(cluster.wait_ready());
        Shared::new(url, None, cluster)
    })
}

/// Three embedded nodes in this test process (`tenure::embedded`, TLS and client
/// authentication on, one port each), reached as `embedded:tenure/2`: a node that may or may
/// not lead, so that requests follow the leader over the shared ports.
fn shared_embedded() -> Arc<Shared> {
    shared(slot!(), || {
        let replicas = Replicas::start(3, true);
        let client = replicas
            .rt(2)
            .block_on(replicas.node(2).client())
            .expect("a client");
        replicas.rt(2).block_on(raft_ready(&client));
        let url = format!("embedded:{}", replicas.node(2).name());
        Shared::new(url, None, replicas)
    })
}

fn shared_etcd() -> Arc<Shared> {
    shared(slot!(), || {
        // TLS with a client certificate, and a user with a password: security on, as it
        // should be in production.
        let certs = TestCerts::issue();
        let etcd = Service::etcd_secure(&certs);
        let url = etcd.etcd_url(PASSWORD_IN_URL, Some(&certs));
        let logs = etcd.dir.path().to_path_buf();
        Shared::new(url, Some(logs), (etcd, certs))
    })
}

fn shared_postgres() -> Arc<Shared> {
    shared(slot!(), || {
        // TLS with the server's certificate verified (its name included), and a password.
        let certs = TestCerts::issue();
        let pg = Service::postgres_secure(&certs);
        assert!(pg.url.contains("sslmode=verify-full"), "{}", pg.url);
        let url = with_password(&pg.url, "tenure", PASSWORD_IN_URL);
        let logs = pg.dir.path().to_path_buf();
        Shared::new(url, Some(logs), (pg, certs))
    })
}

fn shared_zookeeper() -> Arc<Shared> {
    shared(slot!(), || {
        // Digest authentication, and znodes that only that identity may touch.
        let zk = Service::zookeeper();
        let url = zk.zk_url("tenure", PASSWORD_IN_URL);
        let logs = zk.dir.path().to_path_buf();
        Shared::new(url, Some(logs), zk)
    })
}

/// Surviving a coordination-server leader change while the lease holds: a cluster of its
/// own, since it kills the Raft leader.
#[test]
fn cluster_leadership_survives_a_raft_leader_change() {
    let mut cluster = Cluster::start(3);
    let url = cluster.url();
    let rt = runtime();
    rt.block_on(async {
        cluster.wait_ready().await;
        tokio::time::timeout(
            Duration::from_secs(60),
            leadership_survives_a_cluster_leader_change(&url, &mut cluster),
        )
        .await
        .expect("done within 60 s");
    });
    drop(rt);
    drop(cluster);
}

/// The password of the secure backends' user: it holds characters a URL must percent-encode,
/// so that every backend's decoding is exercised too.
const PASSWORD: &str = "s3cret-p@ss:w/rd?";
/// [`PASSWORD`], percent-encoded for a URL.
const PASSWORD_IN_URL: &str = "s3cret-p%40ss%3Aw%2Frd%3F";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// `url` (which names `user@`) with `password` after the user.
fn with_password(url: &str, user: &str, password: &str) -> String {
    let (from, to) = (format!("://{user}@"), format!("://{user}:{password}@"));
    assert!(url.contains(&from), "{url} does not name {user}@");
    url.replacen(&from, &to, 1)
}

/// Neither a `Debug` of a connected client, nor an error it returns, nor the redacted URL
/// shows the password (of the backends that have one; the others have nothing to show).
async fn credentials_stay_hidden(url: String, election: String) {
    let c = Client::connect(&url).await.expect("connect");
    let shown = [
        format!("{c:?}"),
        tenure::redact_url(&url),
        format!("{:?}", c.leader(&format!("{election}-never")).await),
    ];
    for s in shown {
        assert!(
            !s.contains(PASSWORD) && !s.contains(PASSWORD_IN_URL),
            "the password shows in {s}"
        );
    }
}

/// The error `url` is refused with: when connecting, or else at the first request (a
/// `leader` call, which on a working connection answers `UnknownElection`). Panics if both
/// work, and if the error shows a password.
async fn refusal(url: &str) -> Error {
    let attempt = async {
        let c = Client::connect(url).await?;
        match c.leader("refusals").await {
            Ok(_) | Err(Error::UnknownElection(_)) => Ok(()),
            Err(e) => Err(e),
        }
    };
    let redacted = tenure::redact_url(url);
    let err = tokio::time::timeout(Duration::from_secs(15), attempt)
        .await
        .unwrap_or_else(|_| panic!("{redacted} neither worked nor failed within 15 s"))
        .expect_err(&format!("{redacted} was not refused"));
    let shown = format!("{err} {err:?}");
    eprintln!("refused {redacted}: {err:?}");
    for secret in [PASSWORD, PASSWORD_IN_URL, WRONG_PASSWORD] {
        assert!(
            !shown.contains(secret),
            "a password shows in the error: {shown}"
        );
    }
    err
}

/// No log the server wrote into `dir` (`*.log`) holds a password the tests use, in either
/// form; checked when each server stops, unless the test already failed.
fn assert_no_password_in_logs(dir: &Path) {
    if std::thread::panicking() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") {
            let text =
                String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
            for secret in [PASSWORD, PASSWORD_IN_URL, WRONG_PASSWORD] {
                assert!(
                    !text.contains(secret),
                    "{} holds a password",
                    path.display()
                );
            }
        }
    }
}

/// A password the backends do not know.
const WRONG_PASSWORD: &str = "wr0ng-passw0rd";

/// A holder that leads `election` on `url`, to check that refused clients change nothing.
async fn holder(url: &str, election: &str) -> (Client, tenure::Leadership) {
    let c = Client::connect(url).await.expect("connect");
    let l = c
        .campaign(election, b"holder", opts(ms(5000)))
        .await
        .expect("the holder leads");
    (c, l)
}

/// While a holder leads `election` at `url`, `refusals` tries connections that must all be
/// refused; the holder then still leads, with the same token. (The runtime ends here,
/// before the caller's server stops.)
fn refused_while_held(url: &str, election: &str, refusals: impl AsyncFnOnce()) {
    runtime().block_on(async {
        let (c, l) = holder(url, election).await;
        refusals().await;
        still_leads(&c, &l, election).await;
    });
}

/// The holder still leads, with the same token.
async fn still_leads(c: &Client, l: &tenure::Leadership, election: &str) {
    assert!(l.is_valid(), "the holder lost its leadership");
    let now = c
        .leader(election)
        .await
        .expect("leader")
        .expect("someone leads");
    assert_eq!((now.session, now.token), (l.session(), l.token()));
}

#[test]
fn etcd_refuses_wrong_passwords_plaintext_missing_client_certificates_and_other_cas() {
    let certs = TestCerts::issue();
    let etcd = Service::etcd_secure(&certs);
    let holder_url = etcd.etcd_url(PASSWORD_IN_URL, Some(&certs));
    refused_while_held(&holder_url, "etcd-refusals", async || {
        let err = refusal(&etcd.etcd_url(WRONG_PASSWORD, Some(&certs))).await;
        assert!(
            matches!(err, Error::AuthenticationFailed(_)),
            "wrong password: {err:?}"
        );

        // No user: the client certificate names `app`, which is no etcd user.
        let anonymous = etcd.url.replacen("tenure@", "", 1) + &certs.client_query("cert", "key");
        let err = refusal(&anonymous).await;
        assert!(
            matches!(err, Error::PermissionDenied(_)),
            "no user: {err:?}"
        );

        // Plaintext to the TLS-only port.
        let plain = format!("etcd://tenure:{PASSWORD_IN_URL}@127.0.0.1:{}", etcd.port);
        let err = refusal(&plain).await;
        assert!(matches!(err, Error::Unavailable(_)), "plaintext: {err:?}");

        // TLS without a client certificate, where the server requires one.
        // With TLS 1.3 the server refuses after the client's side of the handshake is
        // done, so the client may only see its connection dropped.
        let err = refusal(&etcd.etcd_url(PASSWORD_IN_URL, None)).await;
        assert!(
            matches!(err, Error::Tls(_) | Error::Unavailable(_)),
            "no client certificate: {err:?}"
        );

        // A CA that did not sign the server's certificate.
        let other = etcd.etcd_url(PASSWORD_IN_URL, Some(&certs)).replacen(
            &certs.ca().display().to_string(),
            &certs.other_ca().display().to_string(),
            1,
        );
        let err = refusal(&other).await;
        assert!(matches!(err, Error::Tls(_)), "another CA: {err:?}");
    });
}

#[test]
fn postgres_sslmodes_verify_what_they_say_and_wrong_passwords_and_plaintext_are_refused() {
    let certs = TestCerts::issue();
    let pg = Service::postgres_secure(&certs);
    let port = pg.port;
    let ca = certs.ca().display().to_string();
    let other_ca = certs.other_ca().display().to_string();
    let url = |password: &str, host: &str, query: &str| match password {
        "" => format!("postgres://tenure@{host}:{port}/tenure?{query}"),
        pw => format!("postgres://tenure:{pw}@{host}:{port}/tenure?{query}"),
    };
    let good = |query: &str| url(PASSWORD_IN_URL, "127.0.0.1", query);
    // A name the certificate does not carry: TLS checks `host`, the connection goes to
    // `hostaddr`.
    let misnamed = |query: &str| {
        url(
            PASSWORD_IN_URL,
            "db.invalid",
            &format!("hostaddr=127.0.0.1&{query}"),
        )
    };
    let full = format!("sslmode=verify-full&sslrootcert={ca}");
    let election = "pg-refusals";
    refused_while_held(&good(&full), election, async || {
        // Each mode that should accept this server does.
        for ok in [
            good("sslmode=require"),
            good(&format!("sslmode=require&sslrootcert={ca}")),
            good(&format!("sslmode=verify-ca&sslrootcert={ca}")),
            good("sslmode=prefer"),
            misnamed(&format!("sslmode=verify-ca&sslrootcert={ca}")),
        ] {
            let other = Client::connect(&ok)
                .await
                .unwrap_or_else(|e| panic!("{} refused: {e}", tenure::redact_url(&ok)));
            other.leader(election).await.expect("leader");
        }

        let err = refusal(&url(WRONG_PASSWORD, "127.0.0.1", &full)).await;
        assert!(
            matches!(err, Error::AuthenticationFailed(_)),
            "wrong password: {err:?}"
        );
        let err = refusal(&url("", "127.0.0.1", &full)).await;
        assert!(
            matches!(err, Error::AuthenticationFailed(_)),
            "no password: {err:?}"
        );

        // Plaintext, with the right password: pg_hba.conf admits TLS only.
        for plain in [good("sslmode=disable"), good("")] {
            match refusal(&plain).await {
                Error::AuthenticationFailed(m) => assert!(m.contains("no encryption"), "{m}"),
                other => panic!("plaintext: {other:?}"),
            }
        }

        // Certificates that must not be accepted.
        for (what, bad) in [
            (
                "verify-full, another CA",
                good(&format!("sslmode=verify-full&sslrootcert={other_ca}")),
            ),
            (
                "verify-ca, another CA",
                good(&format!("sslmode=verify-ca&sslrootcert={other_ca}")),
            ),
            (
                "require with sslrootcert, another CA",
                good(&format!("sslmode=require&sslrootcert={other_ca}")),
            ),
            ("verify-full, another name", misnamed(&full)),
        ] {
            let err = refusal(&bad).await;
            assert!(matches!(err, Error::Tls(_)), "{what}: {err:?}");
        }
    });
}

/// A PostgreSQL server without TLS: `sslmode=require` must not fall back to plaintext, while
/// `prefer` and no `sslmode` do connect.
#[test]
fn postgres_require_refuses_a_server_without_tls() {
    let pg = Service::postgres_with(&[("SVC_PASSWORD", PASSWORD.into())]);
    let url = with_password(&pg.url, "tenure", PASSWORD_IN_URL);
    let rt = runtime();
    rt.block_on(async {
        let err = refusal(&format!("{url}?sslmode=require")).await;
        assert!(matches!(err, Error::Tls(_)), "require: {err:?}");
        for ok in [format!("{url}?sslmode=prefer"), url.clone()] {
            let c = Client::connect(&ok).await.expect("connect in plaintext");
            assert!(matches!(
                c.leader("never").await,
                Err(Error::UnknownElection(_))
            ));
        }
    });
    drop(rt);
    drop(pg);
}

#[test]
fn zookeeper_strangers_cannot_touch_an_authenticated_election() {
    use zookeeper_client as zkc;
    let zk = Service::zookeeper();
    let rt = runtime();
    rt.block_on(async {
        let election = "zk-strangers";
        let (c, l) = holder(&zk.zk_url("tenure", PASSWORD_IN_URL), election).await;
        let dir = format!("/tenure/elections/{election}");
        let hosts = format!("127.0.0.1:{}", zk.port);

        // The owner's identity sees the holder's znode.
        let owner = zkc::Client::connector()
            .with_auth("digest", format!("tenure:{PASSWORD}").as_bytes())
            .connect(&hosts)
            .await
            .expect("connect as the owner");
        let children = owner.list_children(&dir).await.expect("the owner lists");
        assert_eq!(children.len(), 1, "{children:?}");
        let node = format!("{dir}/{}", children[0]);

        // Without credentials, and with a wrong password (another digest identity), nothing
        // of the election can be read, deleted, changed or joined.
        let anonymous = zkc::Client::connect(&hosts)
            .await
            .expect("connect anonymously");
        let wrong = zkc::Client::connector()
            .with_auth("digest", format!("tenure:{WRONG_PASSWORD}").as_bytes())
            .connect(&hosts)
            .await
            .expect("connect with a wrong password");
        for (who, z) in [("anonymous", &anonymous), ("wrong password", &wrong)] {
            let denied = |what: &str, r: Result<(), zkc::Error>| {
                assert_eq!(r, Err(zkc::Error::NoAuth), "{who}: {what}");
            };
            denied("delete the holder", z.delete(&node, None).await);
            denied(
                "change its data",
                z.set_data(&node, b"x", None).await.map(|_| ()),
            );
            denied("read it", z.get_data(&node).await.map(|_| ()));
            denied("list the election", z.list_children(&dir).await.map(|_| ()));
            denied(
                "join the queue",
                z.create(
                    &format!("{dir}/n-"),
                    b"intruder",
                    &zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all()),
                )
                .await
                .map(|_| ()),
            );
            denied(
                "open the ACL",
                z.set_acl(&dir, &zkc::Acls::anyone_all(), None)
                    .await
                    .map(|_| ()),
            );
        }

        // The library says so with a typed error, for a wrong password and for none.
        for url in [zk.zk_url("tenure", WRONG_PASSWORD), format!("zk://{hosts}")] {
            let other = Client::connect(&url)
                .await
                .expect("connect (ZooKeeper's digest scheme accepts any identity)");
            let results = [
                ("leader", other.leader(election).await.map(|_| ())),
                ("observe", other.observe(election).await.map(|_| ())),
                (
                    "campaign",
                    other
                        .campaign(election, b"x", opts(ms(2000)))
                        .await
                        .map(|_| ()),
                ),
            ];
            for (what, r) in results {
                assert!(
                    matches!(r, Err(Error::PermissionDenied(_))),
                    "{}: {what}: {r:?}",
                    tenure::redact_url(&url)
                );
            }
        }

        still_leads(&c, &l, election).await;
        assert_eq!(
            owner.list_children(&dir).await.expect("the owner lists"),
            children
        );
    });
    drop(rt);
    drop(zk);
}

/// Certificates for the secure backends, issued as `tenure certs` does: a CA, a server
/// certificate (node 1, which names `127.0.0.1` and `localhost`), a client certificate
/// (`app`); and a second CA that signed none of them.
struct TestCerts {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    other: PathBuf,
}

impl TestCerts {
    fn issue() -> TestCerts {
        let dir = tempfile::Builder::new()
            .prefix("tenure-backend-certs-")
            .tempdir()
            .expect("a temporary directory");
        let issue = |path: &Path| {
            tenure_transport::certs::issue(
                path,
                &tenure_transport::certs::CertsRequest {
                    cluster_id: "tenure".into(),
                    nodes: vec![1],
                    clients: vec!["app".into()],
                    hosts: Vec::new(),
                    days: 1,
                },
            )
            .expect("issue certificates");
        };
        let (certs, other) = (dir.path().join("certs"), dir.path().join("other"));
        issue(&certs);
        issue(&other);
        TestCerts {
            _dir: dir,
            dir: certs,
            other,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn ca(&self) -> PathBuf {
        self.file(tenure_transport::certs::files::CA)
    }

    fn other_ca(&self) -> PathBuf {
        self.other.join(tenure_transport::certs::files::CA)
    }

    /// The server's CA, certificate and key, as `scripts/services.sh` takes them.
    fn server_env(&self) -> Vec<(&'static str, String)> {
        use tenure_transport::certs::files;
        vec![
            ("SVC_TLS_CA", self.ca().display().to_string()),
            (
                "SVC_TLS_CERT",
                self.file(&files::node(1)).display().to_string(),
            ),
            (
                "SVC_TLS_KEY",
                self.file(&files::node_key(1)).display().to_string(),
            ),
        ]
    }

    /// `&CERT=…&KEY=…`, naming the client certificate and its key.
    fn client_query(&self, cert: &str, key: &str) -> String {
        use tenure_transport::certs::files;
        format!(
            "&{cert}={}&{key}={}",
            self.file(&files::client("app")).display(),
            self.file(&files::client_key("app")).display()
        )
    }
}

/// `scripts/services.sh`, which installs, starts and stops the external servers.
fn services_sh() -> PathBuf {
    Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
    )
    .join("../../scripts/services.sh")
}

/// A server that `scripts/services.sh start-NAME` started on loopback in a temporary
/// directory, stopped (`stop-NAME`) when dropped, its logs then checked for passwords.
struct Service {
    name: &'static str,
    dir: tempfile::TempDir,
    /// What `start-NAME` printed: the server's URL, without a password.
    url: String,
    /// The port `start-NAME` wrote into its directory.
    port: u16,
}

impl Service {
    /// `start-NAME` with the security options in `env`; its URL must start with `scheme`.
    fn start(name: &'static str, env: &[(&str, String)], scheme: &str) -> Service {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tenure-{name}-contract-"))
            .tempdir()
            .expect("a temporary directory");
        let out = Command::new("bash")
            .arg(services_sh())
            .arg(format!("start-{name}"))
            .arg(dir.path())
            .arg(std::process::id().to_string())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/services.sh");
        assert!(
            out.status.success(),
            "start-{name} failed (is it installed? run `scripts/services.sh install-{name}`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = String::from_utf8_lossy(&out.stdout);
        let url = out.trim().lines().last().unwrap_or_default().to_string();
        assert!(url.starts_with(scheme), "start-{name} printed {url:?}");
        let port = std::fs::read_to_string(dir.path().join("port"))
            .expect("services.sh writes DIR/port")
            .trim()
            .parse()
            .expect("a port number");
        Service {
            name,
            dir,
            url,
            port,
        }
    }

    /// A standalone ZooKeeper server. Digest authentication needs nothing of the server: the
    /// ACLs the client sets do the work.
    fn zookeeper() -> Service {
        Service::start("zookeeper", &[], "zk://")
    }

    /// A PostgreSQL server with the security options of `start-postgres` in `env`.
    fn postgres_with(env: &[(&str, String)]) -> Service {
        Service::start("postgres", env, "postgres://")
    }

    /// PostgreSQL with TLS with the server certificate of `certs` (and plaintext refused),
    /// and the role `tenure` with [`PASSWORD`]; the printed URL verifies the server against
    /// `certs`' CA.
    fn postgres_secure(certs: &TestCerts) -> Service {
        let mut env = certs.server_env();
        env.push(("SVC_PASSWORD", PASSWORD.into()));
        Service::postgres_with(&env)
    }

    /// A single etcd node, TLS only, with the server certificate of `certs`, client
    /// certificates required, and authentication on: the user `tenure` with [`PASSWORD`].
    /// It prints `etcds://tenure@127.0.0.1:PORT?ca=…`.
    fn etcd_secure(certs: &TestCerts) -> Service {
        let mut env = certs.server_env();
        env.push(("SVC_CLIENT_CERT_AUTH", "1".into()));
        env.push(("SVC_PASSWORD", PASSWORD.into()));
        Service::start("etcd", &env, "etcds://tenure@127.0.0.1:")
    }

    /// ZooKeeper's URL with digest authentication as `user:password`.
    fn zk_url(&self, user: &str, password: &str) -> String {
        format!("zk://{user}:{password}@127.0.0.1:{}", self.port)
    }

    /// etcd's URL as user `tenure` with `password`, and with the client certificate of
    /// `client` if given.
    fn etcd_url(&self, password: &str, client: Option<&TestCerts>) -> String {
        let mut url = with_password(&self.url, "tenure", password);
        if let Some(certs) = client {
            url.push_str(&certs.client_query("cert", "key"));
        }
        url
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(services_sh())
            .arg(format!("stop-{}", self.name))
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .status();
        assert_no_password_in_logs(self.dir.path());
    }
}

async fn leadership_survives_a_cluster_leader_change(url: &str, cluster: &mut Cluster) {
    let ttl = ms(3000);
    let c = Client::connect(url).await.expect("connect");
    let l = c
        .campaign("failover", b"a", opts(ttl))
        .await
        .expect("a leads");
    let raft_leader = cluster.raft_leader().await;
    let horizon = l.valid_until();
    cluster.kill(raft_leader);
    // A new Raft leader takes over and acknowledges the keepalives again: the lease moves
    // past where the old leader's last acknowledgement left it, and never lapses meanwhile.
    let deadline = Instant::now() + ttl + ms(1000);
    while l.valid_until() <= horizon {
        assert!(
            l.is_valid(),
            "leadership lost across a cluster leader change"
        );
        assert!(
            Instant::now() < deadline,
            "no keepalive acknowledged within the TTL"
        );
        tokio::time::sleep(ms(10)).await;
    }
    assert!(l.is_valid());
    let now = c
        .leader("failover")
        .await
        .expect("leader")
        .expect("someone");
    assert_eq!((now.session, now.token), (l.session(), l.token()));
}

// ------------------------------------------------------------------------------------------
// The tenure cluster: the workspace's one harness (`tenure-testkit`), TLS and client
// authentication on; the library connects as the `app` principal.

struct Cluster {
    inner: tenure_testkit::Cluster,
}

impl Cluster {
    fn start(n: usize) -> Cluster {
        Cluster {
            inner: tenure_testkit::Cluster::start(tenure_testkit::Options::nodes(n)),
        }
    }

    /// Every node, with the CA and the `app` client's certificate.
    fn url(&self) -> String {
        use tenure_transport::certs::files;
        let tls = self
            .inner
            .tls()
            .expect("the harness runs clusters with TLS");
        let base = self.inner.url();
        let hosts = base.split('?').next().expect("a URL");
        let app = tenure_testkit::APP_CLIENT;
        format!(
            "{hosts}?ca={}&cert={}&key={}",
            tls.dir.join(files::CA).display(),
            tls.dir.join(files::client(app)).display(),
            tls.dir.join(files::client_key(app)).display()
        )
    }

    /// Wait until the cluster answers reads (an unknown election is an answer).
    async fn wait_ready(&self) {
        let c = Client::connect(&self.url()).await.expect("connect");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match c.leader("warm-up").await {
                Ok(_) | Err(Error::UnknownElection(_)) => return,
                Err(e) => assert!(Instant::now() < deadline, "cluster not ready: {e}"),
            }
            tokio::time::sleep(ms(100)).await;
        }
    }

    /// The node that leads the Raft group.
    async fn raft_leader(&self) -> u64 {
        let ids = self.inner.ids();
        self.inner
            .wait_for_leader(&ids, Duration::from_secs(10))
            .await
            .0
    }

    /// SIGKILL node `id`.
    fn kill(&mut self, id: u64) {
        self.inner.kill(id);
    }
}
