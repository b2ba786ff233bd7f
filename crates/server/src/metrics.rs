//! Metrics in the Prometheus text format, kept in atomics so that the driver thread, the
//! gRPC handlers and the HTTP endpoint share them without locks.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One port's connection counters: the gate of each port ([`crate::conn::Gate`]) counts
/// into them, and `/metrics` shows them.
#[derive(Debug, Default)]
pub struct PortMetrics {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections refused (a limit reached).
    pub refused: AtomicU64,
    /// Connections closed for saying nothing in time, or for idling.
    pub timed_out: AtomicU64,
    /// Of `open`, those not authenticated yet.
    pub unauthenticated_open: AtomicU64,
    /// Unauthenticated connections closed at their deadline.
    pub unauthenticated_timed_out: AtomicU64,
    /// Connections that authenticated but found no authenticated slot (the pool, the
    /// operators' reserve or their principal's cap).
    pub refused_authenticated: AtomicU64,
}

/// A histogram with fixed bucket bounds in milliseconds.
#[derive(Debug)]
pub struct Histogram {
    bounds_ms: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// Sum in microseconds, so that sub-millisecond samples still add up.
    sum_us: AtomicU64,
}

/// Bucket bounds for latencies, in milliseconds.
pub const LATENCY_BUCKETS_MS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
];

/// Bounds of the stage histograms (`tenure_stage_seconds`): finer below a millisecond,
/// where a write's stages are on a local network.
pub const STAGE_BUCKETS_MS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 100.0, 1000.0,
];

/// Where a request's time goes on this node, stage by stage: `tenure_stage_seconds{stage}`.
/// With `tenure_commit_latency_seconds` (a proposal from the driver taking it to its
/// apply) and `tenure_lease_renewal_seconds` (a keepalive from the driver taking it to its
/// acknowledgement), they add up to what a request spends in the server; `tenure bench
/// write` reads them before and after a run and prints the means side by side.
#[derive(Debug)]
pub struct Stages {
    /// A unary gRPC call from its arrival (its headers read, before authentication) until
    /// its handler starts: the body read and decoded, the caller authenticated.
    pub unary_in: Histogram,
    /// A unary gRPC call from its arrival until its handler has built the answer (what is
    /// left is encoding it and writing it to the connection).
    pub unary_total: Histogram,
    /// A proposal waiting in the driver's queue (the API task handed it over until the
    /// driver thread took it).
    pub write_queue: Histogram,
    /// A proposal in the server: from the API task handing it over until the answer is
    /// back in that task.
    pub write_total: Histogram,
    /// On the leader: a proposal taken from the queue until the driver starts writing the
    /// Ready that holds its entry (the rest of the batch of inputs, building the Ready).
    pub propose: Histogram,
    /// On the leader: a committed write's answer handed out, from the moment the driver saw
    /// its entry committed (the Ready that applies it, its write, the answer's decision).
    pub apply: Histogram,
    /// A keepalive waiting in the driver's queue.
    pub keepalive_queue: Histogram,
    /// A keepalive in the server, handed over to answered.
    pub keepalive_total: Histogram,
    /// Writing one Ready's entries and state to the log (before its fsync).
    pub wal_write: Histogram,
    /// That Ready's fsync.
    pub wal_fsync: Histogram,
    /// On the leader: a write of client proposals started (they go to the followers between the
    /// write and its fsync) until the driver sees them committed, that is held durably by a
    /// majority: a follower's network round trip and fsync, or the leader's own write and
    /// fsync, whichever ends later. (The leader's own entries, lease checkpoints and
    /// expiries, are not timed.)
    pub replicate: Histogram,
}

impl Stages {
    fn new() -> Stages {
        let h = || Histogram::new(STAGE_BUCKETS_MS);
        Stages {
            unary_in: h(),
            unary_total: h(),
            propose: h(),
            apply: h(),
            write_queue: h(),
            write_total: h(),
            keepalive_queue: h(),
            keepalive_total: h(),
            wal_write: h(),
            wal_fsync: h(),
            replicate: h(),
        }
    }

    fn render(&self, out: &mut String) {
        let name = "tenure_stage_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Where a request's time goes on this node, stage by stage."
        );
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (stage, h) in [
            ("unary_in", &self.unary_in),
            ("unary_total", &self.unary_total),
            ("propose", &self.propose),
            ("apply", &self.apply),
            ("write_queue", &self.write_queue),
            ("write_total", &self.write_total),
            ("keepalive_queue", &self.keepalive_queue),
            ("keepalive_total", &self.keepalive_total),
            ("wal_write", &self.wal_write),
            ("wal_fsync", &self.wal_fsync),
            ("replicate", &self.replicate),
        ] {
            h.render_series(out, name, &format!("stage=\"{stage}\""));
        }
    }
}

impl Histogram {
    fn new(bounds_ms: &'static [f64]) -> Histogram {
        Histogram {
            bounds_ms,
            buckets: bounds_ms.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    /// Record one sample.
    pub fn observe(&self, d: std::time::Duration) {
        let ms = d.as_secs_f64() * 1000.0;
        for (b, bound) in self.buckets.iter().zip(self.bounds_ms) {
            if ms <= *bound {
                b.fetch_add(1, Relaxed);
            }
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// Sum of all samples (the dashboard charts the mean between two readings).
    pub fn sum(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.sum_us.load(Relaxed))
    }

    /// One labelled series of a histogram family whose HELP and TYPE lines are written.
    fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        for (b, bound) in self.buckets.iter().zip(self.bounds_ms) {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels},le=\"{}\"}} {}",
                bound / 1000.0,
                b.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"+Inf\"}} {}",
            self.count()
        );
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {}",
            self.sum_us.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count());
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (b, bound) in self.buckets.iter().zip(self.bounds_ms) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{}\"}} {}",
                bound / 1000.0,
                b.load(Relaxed)
            );
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count());
        let _ = writeln!(out, "{name}_sum {}", self.sum_us.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {}", self.count());
    }
}

/// Streams held in one pool, by principal: shared by the pool (which counts) and the metrics
/// (which show them).
pub type PrincipalCounts =
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>;

/// Every metric DESIGN.md lists.
#[derive(Debug)]
pub struct Metrics {
    /// Current Raft term.
    pub term: AtomicU64,
    /// Current Raft leader id (0 if unknown).
    pub leader_id: AtomicU64,
    /// 1 if this node leads.
    pub is_leader: AtomicU64,
    /// Changes of the Raft leader seen by this node.
    pub leader_changes: AtomicU64,
    /// Elections this node started (became candidate).
    pub elections_started: AtomicU64,
    /// Pre-vote rounds this node lost.
    pub pre_votes_lost: AtomicU64,
    /// Times this node stopped being leader.
    pub step_downs: AtomicU64,
    /// Keepalive round trip through the driver, receive to acknowledgement.
    pub lease_renewal: Histogram,
    /// Time since the session's previous keepalive reached this node, at each renewal:
    /// how close holders cut it.
    pub lease_age_at_renewal: Histogram,
    /// Sessions expired (applied `Expire` entries).
    pub session_expiries: AtomicU64,
    /// Fate-sharing sessions released because their client closed the stream they were
    /// bound to (applied `Release` entries).
    pub session_releases: AtomicU64,
    /// KeepAlive streams that ended, by who ended them: the client (its half-close, a
    /// reset, its connection's end) or this server (an error answered, a connection it
    /// closed, a shutdown, or an end it could not attribute).
    pub keepalive_streams_closed_by_client: AtomicU64,
    /// See `keepalive_streams_closed_by_client`.
    pub keepalive_streams_closed_by_server: AtomicU64,
    /// Fenced writes rejected for a stale or unissued token.
    pub fenced_rejections: AtomicU64,
    /// Changes of leader in elections (applied).
    pub election_leader_changes: AtomicU64,
    /// Time without a known Raft leader, from losing one to knowing the next.
    pub failover: Histogram,
    /// Proposal to local apply, for proposals made on this node.
    pub commit_latency: Histogram,
    /// One `persist` call: write plus fsync.
    pub fsync_latency: Histogram,
    /// Where a request's time goes, stage by stage.
    pub stages: Stages,
    /// Commit index.
    pub commit_index: AtomicU64,
    /// Applied index.
    pub applied_index: AtomicU64,
    /// Live sessions.
    pub sessions: AtomicU64,
    /// Messages that failed validation (`StepError`).
    pub bad_peer_messages: AtomicU64,
    /// Requests refused PERMISSION_DENIED (not an admin, wrong session secret).
    pub permission_denied: AtomicU64,
    /// Calls refused because their principal spent its calls-per-second budget.
    pub requests_over_rate: AtomicU64,
    /// What each principal holds in the replicated state (sessions, elections, keys and
    /// their bytes), as this node applied it; set by the driver when it changes.
    pub principal_usage:
        std::sync::Mutex<std::collections::BTreeMap<String, tenure_core::sm::Usage>>,
    /// Client requests refused UNAUTHENTICATED (no credentials, unknown token).
    pub unauthenticated: AtomicU64,
    /// The gRPC port's connections.
    pub client_connections: std::sync::Arc<PortMetrics>,
    /// The HTTP port's connections.
    pub http_connections: std::sync::Arc<PortMetrics>,
    /// KeepAlive streams open now.
    pub keepalive_streams: AtomicU64,
    /// KeepAlive streams refused because the pool was full.
    pub keepalive_streams_refused: AtomicU64,
    /// Observe streams open now.
    pub observe_streams: AtomicU64,
    /// Observe streams refused because the pool was full.
    pub observe_streams_refused: AtomicU64,
    /// KeepAlive streams open now, by principal (with authentication on).
    pub keepalive_streams_by_principal: PrincipalCounts,
    /// Observe streams open now, by principal.
    pub observe_streams_by_principal: PrincipalCounts,
    /// InstallSnapshot messages this node sent (each resend counted).
    pub snapshots_sent: AtomicU64,
    /// Snapshots from a leader this node installed (made durable).
    pub snapshots_installed: AtomicU64,
    /// Size of the last snapshot this node made durable (taken or installed), in bytes.
    pub snapshot_bytes: AtomicU64,
    /// The log index the last snapshot made durable here covers.
    pub snapshot_index: AtomicU64,
    /// Time to write and fsync the last snapshot, in microseconds: its own file and the log
    /// record for one this node took (in the background), the whole Ready for an installed one.
    pub snapshot_write_us: AtomicU64,
    /// Time to encode the last snapshot this node took (in the background), in nanoseconds.
    pub snapshot_encode_ns: AtomicU64,
    /// Snapshots this node started and could not write (the log keeps their entries).
    pub snapshot_failures: AtomicU64,
    /// Changes of this node's effective membership.
    pub membership_changes: AtomicU64,
    /// Times this follower found its leader's process gone (fast election) and campaigned
    /// at once.
    pub fast_elections: AtomicU64,
    /// The peer transport, whose counters `/metrics` shows per peer; set once it has
    /// started (a node whose transport is not up yet shows none).
    pub transport: std::sync::OnceLock<tenure_transport::TransportHandle>,
}

/// The version `tenure_build_info` reports: the crate's.
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit `tenure_build_info` reports, if the build was given one in
/// `TENURE_BUILD_COMMIT` (a packager's choice: the build reads no repository).
pub const BUILD_COMMIT: Option<&str> = option_env!("TENURE_BUILD_COMMIT");

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            term: AtomicU64::new(0),
            leader_id: AtomicU64::new(0),
            is_leader: AtomicU64::new(0),
            leader_changes: AtomicU64::new(0),
            elections_started: AtomicU64::new(0),
            pre_votes_lost: AtomicU64::new(0),
            step_downs: AtomicU64::new(0),
            lease_renewal: Histogram::new(LATENCY_BUCKETS_MS),
            lease_age_at_renewal: Histogram::new(LATENCY_BUCKETS_MS),
            session_expiries: AtomicU64::new(0),
            session_releases: AtomicU64::new(0),
            keepalive_streams_closed_by_client: AtomicU64::new(0),
            keepalive_streams_closed_by_server: AtomicU64::new(0),
            fenced_rejections: AtomicU64::new(0),
            election_leader_changes: AtomicU64::new(0),
            failover: Histogram::new(LATENCY_BUCKETS_MS),
            commit_latency: Histogram::new(LATENCY_BUCKETS_MS),
            fsync_latency: Histogram::new(LATENCY_BUCKETS_MS),
            stages: Stages::new(),
            commit_index: AtomicU64::new(0),
            applied_index: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            permission_denied: AtomicU64::new(0),
            requests_over_rate: AtomicU64::new(0),
            principal_usage: Default::default(),
            unauthenticated: AtomicU64::new(0),
            client_connections: Default::default(),
            http_connections: Default::default(),
            keepalive_streams: AtomicU64::new(0),
            keepalive_streams_refused: AtomicU64::new(0),
            observe_streams: AtomicU64::new(0),
            keepalive_streams_by_principal: PrincipalCounts::default(),
            observe_streams_by_principal: PrincipalCounts::default(),
            observe_streams_refused: AtomicU64::new(0),
            bad_peer_messages: AtomicU64::new(0),
            snapshots_sent: AtomicU64::new(0),
            snapshots_installed: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(0),
            snapshot_index: AtomicU64::new(0),
            snapshot_write_us: AtomicU64::new(0),
            snapshot_encode_ns: AtomicU64::new(0),
            snapshot_failures: AtomicU64::new(0),
            membership_changes: AtomicU64::new(0),
            fast_elections: AtomicU64::new(0),
            transport: std::sync::OnceLock::new(),
        }
    }
}

impl Metrics {
    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                v.load(Relaxed)
            );
        };
        let counter = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Relaxed)
            );
        };
        render_build_info(&mut out);
        gauge(&mut out, "tenure_term", "Current Raft term.", &self.term);
        gauge(
            &mut out,
            "tenure_leader_id",
            "Current Raft leader (0 if unknown).",
            &self.leader_id,
        );
        gauge(
            &mut out,
            "tenure_is_leader",
            "1 if this node is the Raft leader.",
            &self.is_leader,
        );
        counter(
            &mut out,
            "tenure_leader_changes_total",
            "Raft leader changes seen.",
            &self.leader_changes,
        );
        counter(
            &mut out,
            "tenure_elections_started_total",
            "Elections started by this node.",
            &self.elections_started,
        );
        counter(
            &mut out,
            "tenure_pre_votes_lost_total",
            "Pre-vote rounds lost by this node.",
            &self.pre_votes_lost,
        );
        counter(
            &mut out,
            "tenure_step_downs_total",
            "Times this node stopped leading.",
            &self.step_downs,
        );
        counter(
            &mut out,
            "tenure_session_expiries_total",
            "Sessions expired.",
            &self.session_expiries,
        );
        counter(
            &mut out,
            "tenure_session_releases_total",
            "Fate-sharing sessions released because their client closed the stream they were bound to.",
            &self.session_releases,
        );
        counter(
            &mut out,
            "tenure_fenced_write_rejections_total",
            "Fenced writes rejected for a stale or unissued token.",
            &self.fenced_rejections,
        );
        counter(
            &mut out,
            "tenure_election_leader_changes_total",
            "Changes of leader in elections.",
            &self.election_leader_changes,
        );
        counter(
            &mut out,
            "tenure_permission_denied_total",
            "Client requests refused PERMISSION_DENIED (no right to the action, wrong session secret).",
            &self.permission_denied,
        );
        for (port, m) in [
            ("client", &self.client_connections),
            ("http", &self.http_connections),
        ] {
            gauge(
                &mut out,
                &format!("tenure_{port}_connections"),
                &format!("Connections open now on the {port} port."),
                &m.open,
            );
            counter(
                &mut out,
                &format!("tenure_{port}_connections_refused_total"),
                &format!("Connections refused on the {port} port (a connection limit reached)."),
                &m.refused,
            );
            counter(
                &mut out,
                &format!("tenure_{port}_connections_timed_out_total"),
                &format!(
                    "Connections closed on the {port} port for saying nothing in time or idling."
                ),
                &m.timed_out,
            );
            gauge(
                &mut out,
                &format!("tenure_{port}_unauthenticated_connections"),
                &format!("Of the {port} port's open connections, those not authenticated yet."),
                &m.unauthenticated_open,
            );
            counter(
                &mut out,
                &format!("tenure_{port}_unauthenticated_timed_out_total"),
                &format!("Connections closed on the {port} port for not authenticating in time."),
                &m.unauthenticated_timed_out,
            );
            counter(
                &mut out,
                &format!("tenure_{port}_connections_refused_authenticated_total"),
                &format!(
                    "Requests on the {port} port whose client authenticated but found no \
                     authenticated slot (the pool, the operators' reserve, its principal's cap)."
                ),
                &m.refused_authenticated,
            );
        }
        gauge(
            &mut out,
            "tenure_keepalive_streams",
            "KeepAlive streams open now.",
            &self.keepalive_streams,
        );
        for (name, kind, counts) in [
            (
                "tenure_principal_keepalive_streams",
                "KeepAlive",
                &self.keepalive_streams_by_principal,
            ),
            (
                "tenure_principal_observe_streams",
                "Observe",
                &self.observe_streams_by_principal,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {kind} streams open now, by principal (its share of the pool).\n\
                 # TYPE {name} gauge"
            );
            let counts = counts.lock().unwrap_or_else(|p| p.into_inner());
            for (principal, n) in counts.iter() {
                // Principal names are DNS labels: nothing to escape in a label value.
                let _ = writeln!(out, "{name}{{principal=\"{principal}\"}} {n}");
            }
        }
        counter(
            &mut out,
            "tenure_requests_over_rate_total",
            "Calls refused RESOURCE_EXHAUSTED quota-exceeded: their principal spent its calls-per-second budget on this node.",
            &self.requests_over_rate,
        );
        {
            let usage = self
                .principal_usage
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            type Field = fn(&tenure_core::sm::Usage) -> u64;
            let fields: [(&str, &str, Field); 4] = [
                ("tenure_principal_sessions", "Live sessions", |u| u.sessions),
                (
                    "tenure_principal_elections",
                    "Elections created and not deleted",
                    |u| u.elections,
                ),
                ("tenure_principal_keys", "Fenced keys written last", |u| {
                    u.keys
                }),
                (
                    "tenure_principal_key_bytes",
                    "Bytes (names plus values) of the fenced keys written last",
                    |u| u.key_bytes,
                ),
            ];
            for (name, what, field) in fields {
                let _ = writeln!(
                    out,
                    "# HELP {name} {what}, by principal (its usage against its quota).\n\
                     # TYPE {name} gauge"
                );
                for (principal, u) in usage.iter() {
                    let _ = writeln!(
                        out,
                        "{name}{{principal=\"{}\"}} {}",
                        label_value(principal),
                        field(u)
                    );
                }
            }
        }
        counter(
            &mut out,
            "tenure_keepalive_streams_refused_total",
            "KeepAlive streams refused RESOURCE_EXHAUSTED (keepalive_streams_max reached).",
            &self.keepalive_streams_refused,
        );
        counter(
            &mut out,
            "tenure_keepalive_streams_closed_by_client_total",
            "KeepAlive streams the client closed (its half-close, a reset, its connection's end).",
            &self.keepalive_streams_closed_by_client,
        );
        counter(
            &mut out,
            "tenure_keepalive_streams_closed_by_server_total",
            "KeepAlive streams this server ended (an error answered, a connection it closed, a shutdown, or an end it could not attribute).",
            &self.keepalive_streams_closed_by_server,
        );
        gauge(
            &mut out,
            "tenure_observe_streams",
            "Observe streams open now.",
            &self.observe_streams,
        );
        counter(
            &mut out,
            "tenure_observe_streams_refused_total",
            "Observe streams refused RESOURCE_EXHAUSTED (observe_streams_max reached).",
            &self.observe_streams_refused,
        );
        counter(
            &mut out,
            "tenure_unauthenticated_total",
            "Client requests refused UNAUTHENTICATED (no credentials, unknown bearer token).",
            &self.unauthenticated,
        );
        counter(
            &mut out,
            "tenure_snapshots_sent_total",
            "InstallSnapshot messages sent to followers.",
            &self.snapshots_sent,
        );
        counter(
            &mut out,
            "tenure_snapshots_installed_total",
            "Snapshots from a leader installed.",
            &self.snapshots_installed,
        );
        counter(
            &mut out,
            "tenure_snapshot_failures_total",
            "Snapshots this node started and could not write (the log keeps their entries).",
            &self.snapshot_failures,
        );
        counter(
            &mut out,
            "tenure_membership_changes_total",
            "Changes of this node's effective membership.",
            &self.membership_changes,
        );
        counter(
            &mut out,
            "tenure_leader_gone_total",
            "Times this follower found its leader's process gone (its connection closed, its \
             peer port refused a reconnect) and campaigned at once (fast election).",
            &self.fast_elections,
        );
        if let Some(transport) = self.transport.get() {
            render_transport(&mut out, transport);
        }
        counter(
            &mut out,
            "tenure_bad_peer_messages_total",
            "Peer messages refused as malformed.",
            &self.bad_peer_messages,
        );
        gauge(
            &mut out,
            "tenure_commit_index",
            "Commit index.",
            &self.commit_index,
        );
        gauge(
            &mut out,
            "tenure_applied_index",
            "Applied index.",
            &self.applied_index,
        );
        gauge(
            &mut out,
            "tenure_sessions",
            "Live sessions.",
            &self.sessions,
        );
        gauge(
            &mut out,
            "tenure_snapshot_bytes",
            "Size of the last snapshot made durable on this node.",
            &self.snapshot_bytes,
        );
        gauge(
            &mut out,
            "tenure_snapshot_index",
            "Log index covered by the last snapshot made durable on this node.",
            &self.snapshot_index,
        );
        let _ = writeln!(
            out,
            "# HELP tenure_snapshot_write_seconds Write plus fsync of the last snapshot.\n\
             # TYPE tenure_snapshot_write_seconds gauge\n\
             tenure_snapshot_write_seconds {}",
            self.snapshot_write_us.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "# HELP tenure_snapshot_encode_seconds Encoding of the last snapshot this node took.\n\
             # TYPE tenure_snapshot_encode_seconds gauge\n\
             tenure_snapshot_encode_seconds {}",
            self.snapshot_encode_ns.load(Relaxed) as f64 / 1e9
        );
        self.lease_renewal.render(
            &mut out,
            "tenure_lease_renewal_seconds",
            "Keepalive receive to acknowledgement.",
        );
        self.lease_age_at_renewal.render(
            &mut out,
            "tenure_lease_age_at_renewal_seconds",
            "Time since the session's previous keepalive, at renewal.",
        );
        self.failover.render(
            &mut out,
            "tenure_failover_seconds",
            "Time without a known Raft leader.",
        );
        self.commit_latency.render(
            &mut out,
            "tenure_commit_latency_seconds",
            "Proposal to apply on the proposing node.",
        );
        self.fsync_latency.render(
            &mut out,
            "tenure_fsync_seconds",
            "Write-ahead log write plus fsync.",
        );
        self.stages.render(&mut out);
        out
    }
}

/// `tenure_build_info{version, commit} 1`, the Prometheus convention for build facts.
fn render_build_info(out: &mut String) {
    let commit = BUILD_COMMIT
        .map(|c| format!(",commit=\"{}\"", label_value(c)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "# HELP tenure_build_info The version of this server binary.\n\
         # TYPE tenure_build_info gauge\n\
         tenure_build_info{{version=\"{}\"{commit}}} 1",
        label_value(BUILD_VERSION)
    );
}

/// A Prometheus label value with `\`, `"` and newlines escaped.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One per-peer metric: name, Prometheus type, help, and how to read it from a peer's state.
type PeerMetric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&tenure_transport::PeerState) -> u64,
);

/// The transport's counters: per peer with a `peer` label, and its transport-wide refusals.
fn render_transport(out: &mut String, transport: &tenure_transport::TransportHandle) {
    let peers = transport.peer_states();
    let per_peer: [PeerMetric; 9] = [
        (
            "tenure_peer_connected",
            "gauge",
            "1 while this node's outbound connection to the peer is up.",
            |p| u64::from(p.outbound_connected),
        ),
        (
            "tenure_peer_frames_sent_total",
            "counter",
            "Message frames written to the peer.",
            |p| p.frames_sent,
        ),
        (
            "tenure_peer_bytes_sent_total",
            "counter",
            "Bytes written to the peer, frame headers included.",
            |p| p.bytes_sent,
        ),
        (
            "tenure_peer_frames_received_total",
            "counter",
            "Message frames read from the peer.",
            |p| p.frames_received,
        ),
        (
            "tenure_peer_bytes_received_total",
            "counter",
            "Bytes read from the peer, frame headers included.",
            |p| p.bytes_received,
        ),
        (
            "tenure_peer_connects_total",
            "counter",
            "Outbound connections to the peer established (TLS and hello done).",
            |p| p.connects,
        ),
        (
            "tenure_peer_connect_failures_total",
            "counter",
            "Outbound connection attempts to the peer that failed (dial, TLS or hello).",
            |p| p.connect_failures,
        ),
        (
            "tenure_peer_reconnects_total",
            "counter",
            "Outbound connections to the peer established after the first.",
            |p| p.reconnects,
        ),
        (
            "tenure_peer_messages_dropped_total",
            "counter",
            "Messages to or from the peer dropped (queue full, peer down, blocked, too large).",
            |p| p.dropped,
        ),
    ];
    for (name, kind, help, value) in per_peer {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (id, p) in &peers {
            let _ = writeln!(out, "{name}{{peer=\"{id}\"}} {}", value(p));
        }
    }
    let t = transport.metrics();
    for (name, help, v) in [
        (
            "tenure_transport_handshake_failures_total",
            "Inbound peer connections closed during the handshake (TLS, hello, cluster, node).",
            t.handshake_failures,
        ),
        (
            "tenure_transport_decode_errors_total",
            "Inbound peer connections closed for a frame that failed to decode.",
            t.decode_errors,
        ),
        (
            "tenure_transport_connections_rejected_total",
            "Inbound peer connections refused because the connection limit was reached.",
            t.connections_rejected,
        ),
        (
            "tenure_transport_dropped_unknown_peer_total",
            "Messages addressed to or from a node that is not a configured peer.",
            t.dropped_unknown_peer,
        ),
        (
            "tenure_transport_dropped_misaddressed_total",
            "Received messages not addressed to this node or not from the connection's node.",
            t.dropped_misaddressed,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
}
