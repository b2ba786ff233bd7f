//! The live dashboard on a real 3-node cluster with TLS and client authentication on: the
//! page and its JSON for observers and admins (anonymous clients refused), every member's
//! row filled from that member's own `/status` (which the cluster's nodes may read with
//! their certificates, and nothing else), the event stream showing a new leader after the
//! leader is killed, and the admin actions refused to observers, to requests without the
//! dashboard's header or from another origin, and for bad input, with nothing changed.
//! When each test's cluster stops, the harness checks that no node logged a credential.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tenure_testkit::*;
use tenure_transport::certs::files;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;

/// Whose certificate a request presents.
#[derive(Clone, Copy, Debug)]
enum As<'a> {
    /// A client principal's.
    Client(&'a str),
    /// A node's (what a member's dashboard presents when it asks for `/status`).
    Node(u64),
    /// None.
    Nobody,
}

async fn connect(c: &Cluster, id: u64, who: As<'_>) -> TlsStream<tokio::net::TcpStream> {
    let dir = &c.tls().expect("TLS is on").dir;
    let ca = dir.join(files::CA);
    let material = |cert: String, key: String| {
        tenure_transport::TlsMaterial::load(&tenure_transport::TlsFiles {
            ca: ca.clone(),
            cert: dir.join(cert),
            key: dir.join(key),
        })
        .expect("load a certificate")
        .client_config()
        .expect("a client TLS config")
    };
    let config = match who {
        As::Client(name) => material(files::client(name), files::client_key(name)),
        As::Node(n) => material(files::node(n), files::node_key(n)),
        As::Nobody => {
            use tokio_rustls::rustls::pki_types::pem::PemObject as _;
            let mut roots = tokio_rustls::rustls::RootCertStore::empty();
            let pem = std::fs::read(&ca).expect("read the CA");
            for cert in tokio_rustls::rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
                roots
                    .add(cert.expect("a CA certificate"))
                    .expect("add the CA");
            }
            tokio_rustls::rustls::ClientConfig::builder_with_provider(Arc::new(
                tokio_rustls::rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth()
        }
    };
    let addr = c.addrs(id).http;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the HTTP port");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::from(addr.ip()), tcp)
        .await
        .expect("TLS handshake")
}

/// One request with `headers` (name, value), answered as (status, body).
async fn request(
    c: &Cluster,
    id: u64,
    who: As<'_>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let exchange = async {
        let mut stream = connect(c, id, who).await;
        let extra: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        let text = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            c.addrs(id).http,
            body.len()
        );
        stream.write_all(text.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw).await;
        raw
    };
    let raw = tokio::time::timeout(secs(10), exchange)
        .await
        .expect("an answer within 10 s");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (code, body.to_string())
}

async fn get_json(c: &Cluster, id: u64, who: As<'_>, path: &str) -> Value {
    let (code, body) = request(c, id, who, "GET", path, &[], "").await;
    assert_eq!(code, 200, "GET {path} on node {id}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
}

/// The `text/event-stream` of `/api/events`, read as it comes (HTTP/1.1 chunked).
struct EventStream {
    stream: TlsStream<tokio::net::TcpStream>,
    raw: Vec<u8>,
    body: String,
    headers_done: bool,
    /// The server ended the body (the last, empty chunk).
    ended: bool,
}

impl EventStream {
    async fn open(c: &Cluster, id: u64, who: As<'_>) -> EventStream {
        let mut stream = connect(c, id, who).await;
        let text = format!(
            "GET /api/events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
            c.addrs(id).http
        );
        stream.write_all(text.as_bytes()).await.expect("write");
        EventStream {
            stream,
            raw: Vec::new(),
            body: String::new(),
            headers_done: false,
            ended: false,
        }
    }

    /// Moves whole chunks from `raw` to `body`.
    fn decode(&mut self) {
        if !self.headers_done {
            let Some(end) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                return;
            };
            let head = String::from_utf8_lossy(&self.raw[..end]).to_lowercase();
            assert!(
                head.starts_with("http/1.1 200"),
                "event stream refused: {head}"
            );
            assert!(head.contains("content-type: text/event-stream"), "{head}");
            self.raw.drain(..end + 4);
            self.headers_done = true;
        }
        loop {
            let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&self.raw[..line_end]).trim(), 16)
                    .expect("a chunk size");
            if self.raw.len() < line_end + 2 + size + 2 {
                return;
            }
            if size == 0 {
                self.ended = true;
            }
            let chunk = &self.raw[line_end + 2..line_end + 2 + size];
            self.body.push_str(&String::from_utf8_lossy(chunk));
            self.raw.drain(..line_end + 2 + size + 2);
        }
    }

    /// The next event record (the `data:` of a message), waiting at most until `deadline`.
    /// Reads until the connection closes (or `within` passes): whether the server ended the
    /// body properly before closing.
    async fn ends_cleanly(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.next(deadline).await.is_some() {}
        self.ended
    }

    async fn next(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            while let Some(end) = self.body.find("\n\n") {
                let event: String = self.body.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                let is_message = !event.lines().any(|l| l.starts_with("event:"));
                if is_message && !data.is_empty() {
                    return Some(serde_json::from_str(&data.join("\n")).expect("a JSON record"));
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let mut buf = [0u8; 8192];
            match tokio::time::timeout(left, self.stream.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) => return None,
                Ok(Ok(n)) => {
                    self.raw.extend_from_slice(&buf[..n]);
                    self.decode();
                }
                // Cut off without TLS close_notify: the caller judges how it ended.
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
                Ok(Err(e)) => panic!("the event stream failed: {e}"),
            }
        }
    }

    /// Reads records until one satisfies `want`, returning it and every record before it.
    async fn until(
        &mut self,
        within: Duration,
        want: impl Fn(&Value) -> bool,
    ) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        while let Some(r) = self.next(deadline).await {
            if want(&r) {
                return (r, seen);
            }
            seen.push(r);
        }
        panic!("no such event within {within:?}; saw {seen:#?}");
    }
}

fn is_leader_news(r: &Value) -> bool {
    matches!(r["kind"].as_str(), Some("leader_elected" | "leader_known"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_data_are_for_observers_and_admins_and_fill_every_member_row() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];

    // The page and its assets: embedded, for observers (the default policy makes every
    // client certificate of the cluster one) and admins; nobody else.
    let (code, page) = request(&c, follower, As::Client(APP_CLIENT), "GET", "/", &[], "").await;
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<title>tenure dashboard</title>"), "{page}");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "the page names no external asset"
    );
    for asset in ["/dashboard.js", "/dashboard.css"] {
        let (code, body) = request(
            &c,
            follower,
            As::Client(ADMIN_CLIENT),
            "GET",
            asset,
            &[],
            "",
        )
        .await;
        assert_eq!(code, 200, "{asset}: {body}");
        assert!(body.len() > 500, "{asset} is served whole");
    }
    for path in [
        "/",
        "/dashboard.js",
        "/api/cluster",
        "/api/events",
        "/api/series",
    ] {
        let (code, body) = request(&c, follower, As::Nobody, "GET", path, &[], "").await;
        assert_eq!(code, 401, "{path} without credentials: {body}");
        // A node certificate opens `/status` only.
        let (code, body) = request(&c, follower, As::Node(leader), "GET", path, &[], "").await;
        assert_eq!(code, 401, "{path} with a node's certificate: {body}");
    }
    let (code, _) = request(&c, follower, As::Node(leader), "GET", "/metrics", &[], "").await;
    assert_eq!(code, 401, "a node's certificate does not open /metrics");

    // `/status` tells vote, last index and version, to the cluster's nodes too.
    let status = get_json(&c, follower, As::Node(leader), "/status").await;
    assert_eq!(status["id"], follower);
    // The vote is a node id, or null in a term this node learned of from a leader without
    // voting (an election under a loaded test machine can leave the follower there).
    assert!(
        status["vote"].is_null() || status["vote"].as_u64().is_some_and(|v| v != 0),
        "{status}"
    );
    assert!(
        status["last_index"].as_u64() >= status["commit_index"].as_u64(),
        "{status}"
    );
    assert_eq!(status["version"], tenure_server::metrics::BUILD_VERSION);

    // Every member's row, from each member's own status, fetched by the serving node.
    let cluster = get_json(&c, follower, As::Client(APP_CLIENT), "/api/cluster").await;
    assert_eq!(cluster["node"], follower);
    assert_eq!(cluster["leader"], leader);
    assert_eq!(cluster["viewer"]["principal"], APP_CLIENT);
    assert_eq!(
        cluster["viewer"]["admin"], false,
        "an observer's page is read-only"
    );
    let members = cluster["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{cluster:#}");
    for m in members {
        let id = m["id"].as_u64().expect("an id");
        assert_eq!(m["reachable"], true, "member {id}: {m:#}");
        assert_eq!(
            m["status"]["id"], id,
            "each row is that member's own answer"
        );
        assert_eq!(m["this_node"], id == follower);
        assert_eq!(m["voter"], true);
        assert!(m["lag"].as_u64().is_some(), "member {id} has a lag: {m:#}");
        let role = m["status"]["role"].as_str().expect("a role");
        assert_eq!(role == "leader", id == leader, "member {id} is {role}");
        assert!(m["status"]["term"].as_u64() >= Some(term));
    }
    let admin = get_json(&c, leader, As::Client(ADMIN_CLIENT), "/api/cluster").await;
    assert_eq!(admin["viewer"]["admin"], true);
    for m in admin["members"].as_array().expect("members") {
        // The leader knows how far each follower's log reaches.
        assert_eq!(m["match_index"].is_u64(), m["id"] != leader, "{m:#}");
    }

    // Elections with holder, token and queue, sessions with TTL and remaining time, as the
    // serving node (a follower, which may lag a little) has applied them.
    let mut client = c.client();
    let holder = client.grant(10_000).await.expect("grant");
    let idle = client.grant(10_000).await.expect("grant");
    let token = client
        .campaign_uncontested("billing/nightly", holder)
        .await
        .expect("campaign");
    let deadline = Instant::now() + secs(10);
    let cluster = loop {
        let cluster = get_json(&c, follower, As::Client(APP_CLIENT), "/api/cluster").await;
        let listed = cluster["elections"]["items"].as_array().map_or(0, Vec::len);
        if listed == 1 && cluster["sessions"]["items"].as_array().map_or(0, Vec::len) == 2 {
            break cluster;
        }
        assert!(
            Instant::now() < deadline,
            "not listed after 10 s: {cluster:#}"
        );
        tokio::time::sleep(ms(100)).await;
    };
    let election = &cluster["elections"]["items"][0];
    assert_eq!(election["name"], "billing/nightly");
    assert_eq!(election["holder"], holder);
    assert_eq!(election["token"], token);
    assert_eq!(election["candidates"], serde_json::json!([]));
    assert_eq!(cluster["elections"]["more"], false);
    assert_eq!(cluster["elections"]["error"], Value::Null);
    let sessions = cluster["sessions"]["items"].as_array().expect("sessions");
    for (row, id) in sessions.iter().zip([holder.min(idle), holder.max(idle)]) {
        assert_eq!(row["id"], id, "in id order: {sessions:#?}");
        assert_eq!(row["ttl_ms"], 10_000);
        let remaining = row["remaining_ms"].as_u64().expect("remaining");
        assert!(remaining > 0 && remaining <= 10_000 * 11 / 10, "{row}");
        let elections = if id == holder {
            serde_json::json!(["billing/nightly"])
        } else {
            serde_json::json!([])
        };
        assert_eq!(row["elections"], elections);
    }

    // Scheduled jobs: the ledgers of `tenure cron` (fenced keys under `tenure-cron/`), the
    // newest runs first; other fenced keys are not jobs.
    let ledger = serde_json::json!({
        "version": 1,
        "through": "2026-12-07T02:00:00Z",
        "open": {"slot": "2026-12-07T02:00:00Z", "state": "running", "attempt": 2,
                 "holder": "b", "token": token, "run_id": "billing/nightly/2026-12-07T02:00:00Z",
                 "slots": 1},
        "runs": [
            {"slot": "2026-12-05T02:00:00Z", "state": "completed", "attempt": 1},
            {"slot": "2026-12-06T02:00:00Z", "state": "missed", "attempt": 0}
        ],
        "counts": {"completed": 1, "failed": 0, "timed_out": 0, "interrupted": 0,
                   "missed": 1, "reruns": 1}
    });
    for (key, value) in [
        ("tenure-cron/billing/nightly", ledger.to_string()),
        ("tenure-crontab", "not a job".to_string()),
    ] {
        client
            .put(key, value.as_bytes(), "billing/nightly", token, secs(10))
            .await
            .expect("a fenced put");
    }
    let deadline = Instant::now() + secs(10);
    let jobs = loop {
        let cluster = get_json(&c, follower, As::Client(APP_CLIENT), "/api/cluster").await;
        if let Some(items) = cluster["schedules"]["items"]
            .as_array()
            .filter(|i| !i.is_empty())
        {
            break items.clone();
        }
        assert!(Instant::now() < deadline, "no job after 10 s: {cluster:#}");
        tokio::time::sleep(ms(100)).await;
    };
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    let job = &jobs[0];
    assert_eq!(job["election"], "billing/nightly");
    assert_eq!(job["token"], token);
    assert_eq!(job["through"], "2026-12-07T02:00:00Z");
    assert_eq!(job["open"]["holder"], "b");
    assert_eq!(job["recent"][0]["state"], "missed", "newest first: {job:#}");
    assert_eq!(job["recent"][1]["state"], "completed");
    assert_eq!(job["counts"]["reruns"], 1);
    assert_eq!(job["error"], Value::Null);

    // The charts' samples: one a second, kept whether or not a page is open.
    let deadline = Instant::now() + secs(10);
    loop {
        let series = get_json(&c, leader, As::Client(APP_CLIENT), "/api/series").await;
        assert_eq!(series["interval_ms"], 1000);
        let samples = series["samples"].as_array().expect("samples");
        if let Some(s) = samples.last() {
            for key in [
                "time_ms",
                "leader_changes",
                "commit_ms",
                "fsync_ms",
                "keepalives_per_s",
            ] {
                assert!(s.get(key).is_some(), "a sample has {key}: {s}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "no sample after 10 s");
        tokio::time::sleep(ms(200)).await;
    }

    // A member that is down is shown as unreachable, and the page still answers.
    let down = c.others(&[leader, follower])[0];
    c.kill(down);
    let cluster = get_json(&c, follower, As::Client(APP_CLIENT), "/api/cluster").await;
    let row = cluster["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|m| m["id"] == down)
        .expect("the killed member's row")
        .clone();
    assert_eq!(row["reachable"], false, "{row:#}");
    assert!(
        row["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{row:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_the_new_leader_after_the_leader_is_killed() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];

    let mut events = EventStream::open(&c, follower, As::Client(APP_CLIENT)).await;
    // On connect, the ring's records: this node learned who leads.
    let (known, backlog) = events
        .until(secs(5), |r| {
            is_leader_news(r) && r["fields"]["leader"] == leader
        })
        .await;
    assert_eq!(known["node"], follower);
    assert_eq!(known["fields"]["term"], term);
    let text = known["text"].as_str().expect("words");
    assert!(
        text.contains(&format!("node {leader} leads term {term}")),
        "{text}"
    );

    c.kill(leader);
    let (elected, before) = events
        .until(secs(15), |r| {
            is_leader_news(r)
                && r["fields"]["leader"] != leader
                && r["fields"]["term"].as_u64() > Some(term)
        })
        .await;
    let new_leader = elected["fields"]["leader"].as_u64().expect("a leader");
    let (agreed, _) = c.wait_for_leader(&c.others(&[leader]), secs(10)).await;
    assert_eq!(
        agreed, new_leader,
        "the stream names the leader the cluster has"
    );
    let seqs: Vec<u64> = backlog
        .iter()
        .chain([&known])
        .chain(&before)
        .chain([&elected])
        .map(|r| r["seq"].as_u64().expect("a seq"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "records arrive once each, in order: {seqs:?}"
    );

    // A node that stops ends its streams (the last chunk) instead of being cut off at the
    // shutdown deadline with the page still attached.
    let status = c.terminate(follower, secs(10)).await;
    assert!(
        status.success(),
        "node {follower} stopped cleanly: {status}"
    );
    assert!(
        events.ends_cleanly(secs(5)).await,
        "the event stream was cut off, not ended, when node {follower} stopped"
    );
}

/// A POST of an admin action: whose certificate, to which node, with which headers.
#[derive(Clone, Copy)]
struct Post<'a> {
    who: As<'a>,
    on: u64,
    headers: &'a [(&'a str, &'a str)],
    path: &'a str,
    body: &'a str,
}

impl<'a> Post<'a> {
    fn who(self, who: As<'a>) -> Post<'a> {
        Post { who, ..self }
    }

    fn on(self, on: u64) -> Post<'a> {
        Post { on, ..self }
    }

    fn headers(self, headers: &'a [(&'a str, &'a str)]) -> Post<'a> {
        Post { headers, ..self }
    }

    fn body(self, body: &'a str) -> Post<'a> {
        self.to(self.path, body)
    }

    fn to(self, path: &'a str, body: &'a str) -> Post<'a> {
        Post { path, body, ..self }
    }

    /// Sends it: the answer must be `code`, and say `says`.
    async fn answered(self, c: &Cluster, code: u16, says: &str) {
        let (got, answer) = request(
            c,
            self.on,
            self.who,
            "POST",
            self.path,
            self.headers,
            self.body,
        )
        .await;
        let what = format!(
            "POST {} {:?} as {:?} on node {}",
            self.path, self.body, self.who, self.on
        );
        assert_eq!(got, code, "{what}: {answer}");
        assert!(answer.contains(says), "{what}: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_actions_need_an_admin_the_dashboard_header_and_this_origin() {
    let c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let target = c.others(&[leader])[0];
    let header = ("x-tenure-dashboard", "1");
    let json = ("content-type", "application/json");
    let to = format!("{{\"to\": {target}}}");

    let (usual, unmarked) = ([header, json], [json]);
    let cross_site = [header, json, ("origin", "https://evil.example")];
    let by_admin = Post {
        who: As::Client(ADMIN_CLIENT),
        on: leader,
        headers: &usual,
        path: "/api/transfer-leadership",
        body: &to,
    };
    let remove = |body| by_admin.to("/api/remove-member", body);
    let remove_target = format!("{{\"id\": {target}}}");
    let on_follower = format!("node {leader} does");
    let bad = "bad request body";
    // (the request, its answer's code, what the answer says)
    let refusals = [
        // Observers and anonymous clients may not act, even with the header.
        (by_admin.who(As::Client(APP_CLIENT)), 403, "admin"),
        (by_admin.who(As::Nobody), 401, ""),
        // Nor a node's certificate.
        (remove(&remove_target).who(As::Node(target)), 401, ""),
        // An admin without the header (a cross-site form could send this much) or from
        // another origin is refused.
        (by_admin.headers(&unmarked), 403, "x-tenure-dashboard"),
        (by_admin.headers(&cross_site), 403, "cross-site"),
        // Bad input: a clear error, and nothing changes.
        (by_admin.body(""), 400, bad),
        (by_admin.body("{}"), 400, bad),
        (by_admin.body("{\"to\": \"two\"}"), 400, bad),
        (by_admin.body("{\"to\": 2, \"why\": 1}"), 400, bad),
        (by_admin.body("not json"), 400, bad),
        (remove("{\"id\": 42}"), 400, "node 42 is not a member"),
        // On a follower: it says who leads.
        (by_admin.on(target), 409, on_follower.as_str()),
    ];
    for (post, code, says) in refusals {
        post.answered(&c, code, says).await;
    }
    let status = c.status_of(leader).await;
    assert!(status.is_leader(), "nothing moved: {status:?}");
    assert_eq!(status.voters, &[1, 2, 3], "nobody was removed");

    // An admin with the header, on the leader, from the page's own origin: done.
    let origin = format!("https://{}", c.addrs(leader).http);
    let from_the_page = [header, json, ("origin", origin.as_str())];
    by_admin.headers(&from_the_page).answered(&c, 200, "").await;
    let (now, _) = c.wait_for_leader(&[target], secs(10)).await;
    assert_eq!(now, target);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_added_at_run_time_gets_its_row_from_the_replicated_directory() {
    use tenure_proto::v1;
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    // Node 4 is in no running node's `--node` flags: only the directory names its address.
    let addrs = c.add_joining_node(4);
    v1::cluster_client::ClusterClient::new(c.channel(leader))
        .add_member(v1::MemberRequest {
            id: 4,
            voter: false,
            peer_addr: addrs.peer.to_string(),
            client_addr: addrs.client.to_string(),
            http_addr: addrs.http.to_string(),
        })
        .await
        .expect("add node 4 as a learner");
    let deadline = Instant::now() + secs(15);
    loop {
        let cluster = get_json(&c, follower, As::Client(APP_CLIENT), "/api/cluster").await;
        let row = cluster["members"]
            .as_array()
            .expect("members")
            .iter()
            .find(|m| m["id"] == 4)
            .cloned();
        if let Some(row) = row.filter(|r| r["reachable"] == true) {
            assert_eq!(row["learner"], true, "{row:#}");
            assert_eq!(row["http_addr"], addrs.http.to_string());
            assert_eq!(row["status"]["id"], 4, "node 4's own answer: {row:#}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 has no reachable row after 15 s: {cluster:#}"
        );
        tokio::time::sleep(ms(100)).await;
    }
}
