//! The files in `deploy/` say true things about the server:
//!
//! - every metric the Grafana dashboard (`deploy/grafana/tenure.json`) and the Prometheus
//!   alert rules (`deploy/prometheus/alerts.yml`) name is exported by every node of a real
//!   cluster, as a series of the kind the expression uses (a histogram only through its
//!   `_bucket`, `_sum` or `_count` series);
//! - the alert rules are valid YAML in Prometheus' rule-file shape, with the expected groups,
//!   and each alert has a `for:`, a severity, a summary and a runbook that is a section of
//!   docs/OPERATIONS.md; the dashboard is valid JSON with a Prometheus data-source variable;
//! - the sample configuration (`deploy/tenure.toml`) parses and validates as the server reads
//!   it, agrees with the file names `tenure certs` writes and with the systemd unit, and its
//!   auth file (`deploy/auth.toml`) loads and grants what its comments say.
//!
//! - `promtool` (Prometheus' own checker: `scripts/services.sh install-promtool`) accepts the
//!   alert rules, every dashboard query and the scrape job, and the alerts' unit tests
//!   (`deploy/prometheus/alerts_test.yml`: each alert fires on its shape, not on the healthy
//!   one beside it) pass.
//!
//! What is *not* checked here: that the TLS files the sample names exist (validation does not
//! open them; a node reads them when it starts).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tenure_testkit::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ------------------------------------------------------------------------------------------
// Metric names in PromQL.

/// The identifiers in a PromQL expression that name tenure metrics (`tenure_…`). String
/// literals (label values such as `job="tenure_x"`) are skipped; every other identifier that
/// starts with `tenure_` is a metric name, as no function, keyword or label of ours does.
fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            // A string literal: up to the same unescaped quote (backquoted ones have no
            // escapes).
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && c != '`' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let ident: String = chars[start..i].iter().collect();
            if ident.starts_with("tenure_") {
                names.insert(ident);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// What a `/metrics` page exports: each metric family's type (`# TYPE`), and the names of the
/// samples it holds.
#[derive(Debug, Default)]
struct Exposition {
    types: BTreeMap<String, String>,
    samples: BTreeSet<String>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut e = Exposition::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    e.types.insert(name.to_string(), kind.to_string());
                }
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                e.samples.insert(line[..end].to_string());
            }
        }
        e
    }

    /// Why `name`, as a PromQL expression uses it, is not a series this page exports (None:
    /// it is). A counter or gauge is used by its own name; a histogram only through
    /// `_bucket`, `_sum` and `_count` (its bare name is no series); a summary through `_sum`
    /// and `_count` and its own name (the quantiles). The suffix is stripped only when what
    /// remains is such a family, so a counter that happens to end in `_count` is a counter.
    fn refuses(&self, name: &str) -> Option<String> {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                let kind = self.types.get(base)?;
                let fits = match kind.as_str() {
                    "histogram" => true,
                    "summary" => *suffix != "_bucket",
                    _ => false,
                };
                fits.then(|| (base.to_string(), kind.clone()))
            })
            .or_else(|| {
                self.types
                    .get(name)
                    .map(|kind| (name.to_string(), kind.clone()))
            });
        let Some((family, kind)) = family else {
            return Some("no metric family of that name is exported".into());
        };
        if family == name && kind == "histogram" {
            return Some(
                "is a histogram: use its _bucket, _sum or _count series, the bare name is no series"
                    .into(),
            );
        }
        if !self.samples.contains(name) {
            return Some(format!(
                "the {kind} {family} is declared but has no {name} sample"
            ));
        }
        None
    }
}

/// Every metric name used in `deploy/`'s dashboard and alert rules, with where it is used.
fn names_used_in_deploy() -> BTreeMap<String, BTreeSet<String>> {
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, rule) in alert_rules()
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .flat_map(|r| {
            promql_metric_names(&r.expr)
                .into_iter()
                .map(|n| (n, r.alert.clone()))
        })
    {
        used.entry(name)
            .or_default()
            .insert(format!("alert {rule}"));
    }
    for (where_, expr) in dashboard_queries(&dashboard()) {
        for name in promql_metric_names(&expr) {
            used.entry(name).or_default().insert(where_.clone());
        }
    }
    used
}

// ------------------------------------------------------------------------------------------
// The alert rules.

/// Prometheus' rule-file shape, as far as these rules use it; an unknown key is refused
/// (Prometheus refuses it too).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<AlertRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlertRule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

fn alert_rules() -> RuleFile {
    serde_yaml::from_str(&read("deploy/prometheus/alerts.yml"))
        .expect("deploy/prometheus/alerts.yml is a Prometheus rule file")
}

/// A Prometheus duration such as `30s`, `10m` or `1h30m`, in seconds.
fn prometheus_duration_s(text: &str) -> Option<u64> {
    let mut total = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return None,
        };
        total += n * unit;
        rest = &rest[unit_len..];
    }
    Some(total)
}

/// GitHub's anchors for the headings of a markdown file: lowercase, punctuation other than
/// `-` and `_` dropped, spaces made `-`.
fn markdown_anchors(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_alert_rules_have_the_expected_groups_each_with_a_for_a_severity_and_a_runbook() {
    let rules = alert_rules();
    let groups: Vec<(&str, Vec<&str>)> = rules
        .groups
        .iter()
        .map(|g| {
            (
                g.name.as_str(),
                g.rules.iter().map(|r| r.alert.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            (
                "tenure-leadership",
                vec!["TenureNoLeader", "TenureLeaderFlapping"]
            ),
            (
                "tenure-replication",
                vec!["TenureMemberLagging", "TenureFsyncSlow"]
            ),
            ("tenure-fencing", vec!["TenureFencedRejectionsRising"]),
        ]
    );
    let anchors = markdown_anchors(&read("docs/OPERATIONS.md"));
    for rule in rules.groups.iter().flat_map(|g| &g.rules) {
        let name = &rule.alert;
        let for_ = rule
            .for_
            .as_deref()
            .unwrap_or_else(|| panic!("{name} has no for:"));
        let for_s = prometheus_duration_s(for_)
            .unwrap_or_else(|| panic!("{name}: for: {for_:?} is not a duration"));
        assert!(for_s > 0, "{name}: for: {for_} fires on one evaluation");
        let severity = rule.labels.get("severity").map(String::as_str);
        assert!(
            matches!(severity, Some("critical" | "warning")),
            "{name}: severity {severity:?}"
        );
        for key in ["summary", "description"] {
            assert!(
                rule.annotations
                    .get(key)
                    .is_some_and(|s| !s.trim().is_empty()),
                "{name} has no {key}"
            );
        }
        let runbook = rule
            .annotations
            .get("runbook_url")
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let anchor = runbook
            .strip_prefix("docs/OPERATIONS.md#")
            .unwrap_or_else(|| panic!("{name}: runbook {runbook:?} is not in docs/OPERATIONS.md"));
        assert!(
            anchors.contains(anchor),
            "{name}: docs/OPERATIONS.md has no section #{anchor}"
        );
        assert!(
            !promql_metric_names(&rule.expr).is_empty(),
            "{name} names no tenure metric"
        );
    }
}

// ------------------------------------------------------------------------------------------
// The dashboard.

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&read("deploy/grafana/tenure.json"))
        .expect("deploy/grafana/tenure.json is JSON")
}

/// Every PromQL query of the dashboard, with where it is: each panel target's `expr` and
/// each template variable's query.
fn dashboard_queries(dash: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title:?} has a target without expr"));
            out.push((format!("panel {title:?}"), expr.to_string()));
        }
    }
    for var in dash["templating"]["list"].as_array().expect("templating") {
        let name = var["name"].as_str().unwrap_or("?");
        if var["type"] == "query" {
            let query = var["query"]["query"]
                .as_str()
                .or(var["query"].as_str())
                .unwrap_or_else(|| panic!("variable {name} has no query"));
            out.push((format!("variable {name}"), query.to_string()));
        }
    }
    out
}

#[test]
fn the_dashboard_is_grafana_json_with_a_prometheus_data_source_variable() {
    let dash = dashboard();
    assert!(dash["title"].is_string() && dash["uid"].is_string());
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let vars = dash["templating"]["list"].as_array().expect("variables");
    let ds = vars
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a data-source variable");
    assert_eq!(ds["query"], "prometheus");
    let ds_ref = format!("${{{}}}", ds["name"].as_str().expect("its name"));
    let panels = dash["panels"].as_array().expect("panels");
    let mut charts = 0;
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().expect("every panel has a title");
        assert_eq!(p["datasource"]["uid"], ds_ref.as_str(), "panel {title:?}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], ds_ref.as_str(), "panel {title:?}");
        }
        for key in ["x", "y", "w", "h"] {
            assert!(p["gridPos"][key].is_u64(), "panel {title:?}: gridPos.{key}");
        }
        charts += 1;
    }
    assert!(charts >= 10, "only {charts} panels");
    let used = names_used_in_deploy();
    // What the dashboard is for (the issue's list), each by the metric that shows it.
    for name in [
        "tenure_is_leader",
        "tenure_term",
        "tenure_leader_changes_total",
        "tenure_commit_latency_seconds_bucket",
        "tenure_fsync_seconds_bucket",
        "tenure_lease_renewal_seconds_count",
        "tenure_sessions",
        "tenure_fenced_write_rejections_total",
        "tenure_peer_bytes_sent_total",
        "tenure_applied_index",
    ] {
        assert!(
            used.get(name)
                .is_some_and(|w| w.iter().any(|w| w.starts_with("panel"))),
            "no panel shows {name}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// Against a live cluster.

#[test]
fn the_name_check_refuses_misspelt_names_and_bare_histograms() {
    let page = "# HELP tenure_fsync_seconds x\n# TYPE tenure_fsync_seconds histogram\n\
        tenure_fsync_seconds_bucket{le=\"0.001\"} 1\ntenure_fsync_seconds_bucket{le=\"+Inf\"} 1\n\
        tenure_fsync_seconds_sum 0.0005\ntenure_fsync_seconds_count 1\n\
        # TYPE tenure_term gauge\ntenure_term 3\n\
        # TYPE tenure_peer_connected gauge\n\
        # TYPE tenure_jobs_count counter\ntenure_jobs_count 2\n";
    let e = Exposition::parse(page);
    for ok in [
        "tenure_term",
        "tenure_fsync_seconds_bucket",
        "tenure_fsync_seconds_sum",
        "tenure_fsync_seconds_count",
        "tenure_jobs_count",
    ] {
        assert_eq!(e.refuses(ok), None, "{ok}");
    }
    for (bad, why) in [
        ("tenure_fsync_second_bucket", "no metric family"),
        ("tenure_trem", "no metric family"),
        ("tenure_fsync_seconds", "is a histogram"),
        ("tenure_term_count", "no metric family"),
        (
            "tenure_peer_connected",
            "has no tenure_peer_connected sample",
        ),
    ] {
        let refused = e.refuses(bad).unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(refused.contains(why), "{bad}: {refused}");
    }
    assert_eq!(
        promql_metric_names(
            r#"histogram_quantile(0.99, sum by (le) (rate(tenure_fsync_seconds_bucket{job="tenure_x", a='tenure_y'}[5m]))) > on (job) tenure:rule"#
        ),
        BTreeSet::from(["tenure_fsync_seconds_bucket".to_string()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_name_is_exported_by_every_node() {
    let used = names_used_in_deploy();
    assert!(
        used.len() >= 20,
        "only {} names found: {used:?}",
        used.len()
    );

    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    // Traffic, so that the histograms and counters the panels chart have moved: a session,
    // a campaign, a fenced write, and a late write with a superseded token, which the fence
    // refuses.
    let mut client = c.client();
    let (old_session, old_token) = client.writer_token("billing/close").await;
    client
        .put(
            "billing/keys/day",
            b"1",
            "billing/close",
            old_token,
            secs(10),
        )
        .await
        .expect("fenced put");
    let next = client.grant(600_000).await.expect("grant");
    let ch = c.channel(leader);
    let mut elections = tenure_proto::v1::elections_client::ElectionsClient::new(ch);
    let queued = {
        let mut elections = elections.clone();
        tokio::spawn(async move {
            elections
                .campaign(tenure_proto::v1::CampaignRequest {
                    election: "billing/close".into(),
                    session_id: next,
                    value: b"standby".to_vec(),
                    session_secret: secret(),
                    ..Default::default()
                })
                .await
        })
    };
    // The holder resigns; the standby leads with a higher token, whether its campaign was
    // queued behind the holder by then or arrives after.
    elections
        .resign(tenure_proto::v1::ResignRequest {
            election: "billing/close".into(),
            session_id: old_session,
            session_secret: secret(),
            ..Default::default()
        })
        .await
        .expect("the holder resigns");
    let new_token = tokio::time::timeout(secs(10), queued)
        .await
        .expect("the standby is elected in time")
        .expect("the campaign task")
        .expect("the standby's campaign")
        .into_inner()
        .token;
    assert!(new_token > old_token);
    let late = client
        .put(
            "billing/keys/day",
            b"stale",
            "billing/close",
            old_token,
            secs(10),
        )
        .await;
    assert!(
        late.is_err(),
        "a write with a superseded token was accepted"
    );
    c.wait_caught_up(leader, &c.ids(), secs(10)).await;

    for id in c.ids() {
        let page = c.metrics(id).await;
        let exported = Exposition::parse(&page);
        let missing: Vec<String> = used
            .iter()
            .filter_map(|(name, where_)| {
                exported.refuses(name).map(|why| {
                    format!(
                        "{name} ({}): {why}",
                        Vec::from_iter(where_.iter().cloned()).join(", ")
                    )
                })
            })
            .collect();
        assert!(
            missing.is_empty(),
            "node {id} does not export what deploy/ names:\n  {}",
            missing.join("\n  ")
        );
        let rejected = metric_value(&page, "tenure_fenced_write_rejections_total");
        assert!(
            rejected.is_some_and(|n| n >= 1.0),
            "node {id} counted the late write: {rejected:?}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// The sample configuration, its auth file and the systemd unit.

/// `Key=value` lines of a systemd unit, by key (a key given twice keeps both values).
fn unit_settings(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with('[') || line.is_empty() {
            continue;
        }
        let (k, v) = line.split_once('=').expect("a unit line is Key=value");
        out.entry(k.to_string()).or_default().push(v.to_string());
    }
    out
}

#[test]
fn the_sample_config_validates_and_agrees_with_tenure_certs_and_the_systemd_unit() {
    let path = repo().join("deploy/tenure.toml");
    let config = tenure_server::ServerConfig::from_toml_file(&path).expect("the sample parses");
    config.validate().expect("the sample validates");
    assert_eq!(config.nodes.len(), 3, "a three-node cluster");
    assert!(!config.insecure && !config.join && !config.fault_injection);
    // TLS on, with the files `tenure certs --out /etc/tenure/certs` writes for this node.
    let certs = Path::new("/etc/tenure/certs");
    assert_eq!(
        config.tls,
        Some(tenure_server::TlsPaths::in_dir(certs, config.id)),
        "the sample's [tls] is what `tenure certs` writes for node {}",
        config.id
    );
    // The same file for node 2, as its comment says: only the id and the node's own files.
    let node2 = read("deploy/tenure.toml")
        .replace("id = 1\n", "id = 2\n")
        .replace("node-1.pem", "node-2.pem")
        .replace("node-1-key.pem", "node-2-key.pem");
    let c2: tenure_server::ServerConfig = toml::from_str(&node2).expect("node 2's copy parses");
    c2.validate().expect("node 2's copy validates");
    assert_eq!(c2.tls, Some(tenure_server::TlsPaths::in_dir(certs, 2)));

    // Auth on: the auth file it names is deploy/auth.toml, which loads and means what its
    // comments say.
    assert_eq!(
        config.auth_file.as_deref(),
        Some(Path::new("/etc/tenure/auth.toml"))
    );
    let policy = tenure_server::auth::Policy::load(&repo().join("deploy/auth.toml"))
        .expect("auth.toml loads");
    use tenure_server::auth::Action;
    let may = |who: &str, action: Action<'_>| policy.check(None, Some(who), &action).is_ok();
    assert!(may("admin", Action::Admin));
    assert!(may("billing", Action::Campaign("billing/close")));
    let write = |key, election| Action::Write { key, election };
    assert!(may("billing", write("billing/keys/day", "billing/close")));
    assert!(!may("billing", write("billing/close", "billing/close")));
    assert!(!may("billing", write("billing/keys/day", "payroll/close")));
    assert!(!may("billing", Action::Campaign("payroll/close")));
    assert!(!may("billing", Action::Admin));
    assert!(may("prometheus", Action::Metrics));
    assert!(!may(
        "prometheus",
        write("billing/keys/day", "billing/close")
    ));
    assert!(!may("stranger", Action::Status));

    // The systemd unit runs the server with this file and lets it write its data directory
    // and nothing else.
    let unit = unit_settings(&read("deploy/systemd/tenure.service"));
    let one = |k: &str| -> &str {
        match unit.get(k).map(Vec::as_slice) {
            Some([v]) => v,
            other => panic!("the unit has {other:?} for {k}"),
        }
    };
    let exec: Vec<&str> = one("ExecStart").split_whitespace().collect();
    assert_eq!(
        exec[1..],
        ["server", "--config", "/etc/tenure/tenure.toml"],
        "ExecStart"
    );
    assert_eq!(
        one("ReadWritePaths"),
        config.data_dir.to_str().expect("UTF-8")
    );
    assert_eq!(
        Path::new("/var/lib").join(one("StateDirectory")),
        config.data_dir,
        "systemd creates the data directory"
    );
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(one("User"), "tenure");
    assert!(one("LimitNOFILE").parse::<u64>().is_ok_and(|n| n >= 4096));
    // A configuration the server refuses exits 2; restarting cannot help.
    assert_eq!(one("RestartPreventExitStatus"), "2");
}

#[test]
fn the_sample_scrape_job_scrapes_every_node_of_the_sample_over_tls_with_a_token() {
    let scrape: serde_yaml::Value =
        serde_yaml::from_str(&read("deploy/prometheus/prometheus.yml")).expect("YAML");
    let rule_files = scrape["rule_files"].as_sequence().expect("rule_files");
    assert_eq!(rule_files.len(), 1);
    let jobs = scrape["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs");
    let [job] = jobs.as_slice() else {
        panic!("one scrape job for one cluster, got {}", jobs.len())
    };
    assert_eq!(job["scheme"], "https", "the sample has TLS on");
    assert!(job["tls_config"]["ca_file"]
        .as_str()
        .is_some_and(|f| f.ends_with("/ca.pem")));
    assert!(job["authorization"]["credentials_file"].is_string());
    let targets: BTreeSet<String> = job["static_configs"][0]["targets"]
        .as_sequence()
        .expect("targets")
        .iter()
        .map(|t| t.as_str().expect("a target is a string").to_string())
        .collect();
    let config = tenure_server::ServerConfig::from_toml_file(&repo().join("deploy/tenure.toml"))
        .expect("the sample parses");
    let http: BTreeSet<String> = config.nodes.values().map(|n| n.http.to_string()).collect();
    assert_eq!(targets, http, "the job scrapes every node's HTTP address");
}

/// Prometheus' `promtool`: `$PROMTOOL`, on `PATH`, or where `scripts/services.sh
/// install-promtool` unpacks it.
fn promtool() -> PathBuf {
    if let Some(p) = std::env::var_os("PROMTOOL") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file());
    let unpacked = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/tenure/promtool/usr/bin/promtool"))
        .filter(|p| p.is_file());
    on_path.or(unpacked).unwrap_or_else(|| {
        panic!("promtool not found: run scripts/services.sh install-promtool (or set PROMTOOL)")
    })
}

fn run_promtool(args: &[&std::ffi::OsStr]) {
    let out = std::process::Command::new(promtool())
        .args(args)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_the_rules_the_dashboard_queries_and_the_scrape_job_and_the_alert_tests_pass() {
    let deploy = repo().join("deploy/prometheus");
    run_promtool(&[
        "check".as_ref(),
        "rules".as_ref(),
        deploy.join("alerts.yml").as_os_str(),
    ]);
    // The unit tests read alerts.yml relative to their own file.
    run_promtool(&[
        "test".as_ref(),
        "rules".as_ref(),
        deploy.join("alerts_test.yml").as_os_str(),
    ]);

    let dir = tempfile::tempdir().expect("tempdir");
    // Every dashboard query as a recording rule, with the variables Grafana fills in given
    // values, so that promtool parses each one.
    let rules: Vec<serde_json::Value> = dashboard_queries(&dashboard())
        .into_iter()
        .filter(|(where_, _)| where_.starts_with("panel"))
        .enumerate()
        .map(|(i, (_, expr))| {
            let expr = expr
                .replace("$__rate_interval", "1m")
                .replace("$job", "tenure")
                .replace("$instance", ".*");
            serde_json::json!({ "record": format!("dashboard:query{i}"), "expr": expr })
        })
        .collect();
    let file = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    let queries = dir.path().join("dashboard-queries.yml");
    std::fs::write(&queries, file.to_string()).expect("write");
    run_promtool(&["check".as_ref(), "rules".as_ref(), queries.as_os_str()]);

    // The scrape job, with the files it names made to exist here.
    let (ca, token) = (dir.path().join("ca.pem"), dir.path().join("token"));
    std::fs::write(&ca, "").expect("write");
    std::fs::write(&token, "t").expect("write");
    let mut job = read("deploy/prometheus/prometheus.yml");
    for (from, to) in [
        (
            "/etc/prometheus/tenure-alerts.yml",
            deploy.join("alerts.yml"),
        ),
        ("/etc/tenure/certs/ca.pem", ca),
        ("/etc/prometheus/tenure-token", token),
    ] {
        assert!(job.contains(from), "the scrape job names {from}");
        job = job.replace(from, to.to_str().expect("UTF-8"));
    }
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, job).expect("write");
    run_promtool(&["check".as_ref(), "config".as_ref(), config.as_os_str()]);
}
