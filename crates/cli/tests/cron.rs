//! `tenure cron` on a real 3-node cluster (TLS and client authentication on), and on a real
//! PostgreSQL (TLS, a password), etcd (TLS, client certificates, a password) and ZooKeeper
//! (digest authentication): three replicas on a one-second schedule while the holder is
//! SIGKILLed, frozen (SIGSTOP) past its lease while its command runs, and (on the cluster)
//! the Raft leader is killed. Then, from the ledger and from what the commands wrote:
//! - every slot from the first to the last is decided exactly once, `completed` (on a rerun
//!   with the same run id and a higher attempt), none missed or skipped;
//! - no two commands ever ran at once (each command's last line precedes the next start);
//! - the frozen holder's late record was refused by the store;
//! - each start of a slot carried the slot's run id, and a completed slot never started
//!   again.
//!
//! Each command is `sh` appending `start NAME SLOT RUN_ID ATTEMPT TOKEN NS`, `tick NAME NS`
//! every 50 ms for 300 ms, then `end NAME SLOT NS` to a shared file.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{stderr, stdout, tenure, Cluster, Spawned, BIN};

const SCRIPT: &str = r#"
echo "start $1 $TENURE_SLOT $TENURE_RUN_ID $TENURE_ATTEMPT $TENURE_FENCING_TOKEN $(date +%s%N)" >> "$2"
for i in 1 2 3 4 5 6; do echo "tick $1 $(date +%s%N)" >> "$2"; sleep 0.05; done
echo "end $1 $TENURE_SLOT $(date +%s%N)" >> "$2"
"#;

const ELECTION: &str = "drill";

#[test]
fn bad_schedules_and_zones_are_refused_before_anything_is_contacted() {
    for (args, what) in [
        (vec!["--schedule", "61 * * * *"], "61 * * * *"),
        (
            vec!["--schedule", "0 2 * * *", "--tz", "Mars/Olympus"],
            "Mars/Olympus",
        ),
        (
            vec!["--catch-up", "soon", "--schedule", "* * * * *"],
            "--catch-up",
        ),
    ] {
        let mut all = vec![
            "cron",
            "--election",
            "e",
            "--backend",
            "tenure://127.0.0.1:1",
        ];
        all.extend(args);
        all.extend(["--", "true"]);
        let out = tenure(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(what), "{all:?}: {}", stderr(&out));
    }
    let out = tenure(&[
        "cron",
        "next",
        "--schedule",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "-n",
        "2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains("02:30:00 CE"), "{text}");
}

/// One `tenure cron` replica; its stderr goes to a file.
struct Replica {
    name: String,
    proc: Spawned,
    log: PathBuf,
}

impl Replica {
    fn start(url: &str, name: &str, dir: &Path, file: &Path) -> Replica {
        let log = dir.join(format!("{name}.log"));
        let err = File::create(&log).expect("a log file");
        let proc = Spawned::new(
            Command::new(BIN)
                .args(["cron", "--election", ELECTION, "--backend", url])
                .args(["--schedule", "* * * * * *", "--catch-up", "1m"])
                .args(["--ttl", "2s", "--grace", "500ms", "--value", name])
                .arg("--metrics-file")
                .arg(dir.join(format!("{name}.prom")))
                .arg("--events")
                .arg(dir.join("events.jsonl"))
                .args(["--", "sh", "-c", SCRIPT, "sh", name])
                .arg(file)
                .stdout(Stdio::null())
                .stderr(err),
        );
        Replica {
            name: name.to_string(),
            proc,
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_default()
}

/// Waits until a command is running (a `start` without its `end`), and returns the name
/// of the replica that started it.
fn running_now(file: &Path, within: Duration, replicas: &[Replica]) -> String {
    let deadline = Instant::now() + within;
    loop {
        let text = read(file);
        let mut open: Option<String> = None;
        for l in text.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.first() {
                Some(&"start") => open = Some(f[1].to_string()),
                Some(&"end") => open = None,
                _ => {}
            }
        }
        // A start seen just now: its command has most of its 300 ms left.
        if let Some(name) = open {
            if text.lines().last().is_some_and(|l| l.starts_with("start ")) {
                return name;
            }
        }
        if Instant::now() >= deadline {
            let logs: String = replicas
                .iter()
                .map(|r| format!("--- {}\n{}", r.name, r.log()))
                .collect();
            panic!("no command started within {within:?}\n{text}\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn three_replicas_run_every_slot_once_through_kills_freezes_and_a_leader_crash() {
    let mut cluster = Cluster::start(3);
    let url = cluster.url();
    drill(&url, || {
        // 3. Kill the Raft leader; the cluster elects another and slots go on.
        let raft_leader = cluster.leader();
        cluster.kill(raft_leader);
        eprintln!("killed raft leader node {raft_leader}");
    });
}

/// The same drill with the ledger in PostgreSQL (TLS, a password): the backend's own fenced
/// keys. Its third fault is none: one PostgreSQL server has no leader to kill.
#[test]
fn on_postgresql_every_slot_runs_once_through_kills_and_freezes() {
    let pg = tenure_testkit::services::Service::postgres_secure("cron-drill-password");
    drill(&pg.url, || eprintln!("no third fault on PostgreSQL"));
}

/// The same drill with the ledger in etcd (TLS, client certificates, a password): a fenced
/// key written by a compare-and-set that lands only while the writer's candidacy leads. No
/// third fault: one etcd node has no leader to kill.
#[test]
fn on_etcd_every_slot_runs_once_through_kills_and_freezes() {
    let etcd = tenure_testkit::services::Service::etcd_secure("cron-drill-password");
    drill(&etcd.url, || eprintln!("no third fault on etcd"));
}

/// The same drill with the ledger in ZooKeeper (digest authentication): a fenced key written
/// by a `multi` that checks the writer's candidacy. No third fault: a standalone server.
#[test]
fn on_zookeeper_every_slot_runs_once_through_kills_and_freezes() {
    let zk = tenure_testkit::services::Service::zookeeper("cron-drill-password");
    drill(&zk.url, || eprintln!("no third fault on ZooKeeper"));
}

/// Three replicas on a one-second schedule at `url`; SIGKILL of the holder mid-run, SIGSTOP
/// of another past its lease mid-run, then `third_fault`; then the checks of the module
/// docs.
fn drill(url: &str, third_fault: impl FnOnce()) {
    let url = url.to_string();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("runs");
    let mut replicas: Vec<Replica> = ["r1", "r2", "r3"]
        .iter()
        .map(|n| Replica::start(&url, n, dir.path(), &file))
        .collect();
    let index = |replicas: &[Replica], name: &str| {
        replicas
            .iter()
            .position(|r| r.name == name)
            .expect("a replica by that name")
    };

    // Slots run for a while.
    std::thread::sleep(Duration::from_secs(5));

    // 1. SIGKILL the holder while its command runs: the command dies with it, and the next
    //    leader reruns that slot.
    let holder = running_now(&file, Duration::from_secs(10), &replicas);
    let i = index(&replicas, &holder);
    replicas[i].proc.signal(libc::SIGKILL);
    replicas[i].proc.wait(Duration::from_secs(5));
    eprintln!("killed holder {holder}");
    let killed = replicas.remove(i);
    replicas.push(Replica::start(
        &url,
        &format!("{holder}b"),
        dir.path(),
        &file,
    ));
    std::thread::sleep(Duration::from_secs(6));

    // 2. Freeze the holder (the runner, not its command) past its lease while its command
    //    runs: the guard kills the command at the lease's end, another replica takes the
    //    slot up, and the frozen one's record is refused when it wakes.
    let frozen = running_now(&file, Duration::from_secs(10), &replicas);
    let f = index(&replicas, &frozen);
    replicas[f].proc.signal(libc::SIGSTOP);
    eprintln!("froze holder {frozen}");
    std::thread::sleep(Duration::from_secs(5));
    replicas[f].proc.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_secs(5));

    third_fault();
    std::thread::sleep(Duration::from_secs(8));

    for r in &mut replicas {
        r.proc.stop(Duration::from_secs(10));
    }
    let runs = read(&file);
    let logs: String = replicas
        .iter()
        .chain([&killed])
        .map(|r| format!("--- {}\n{}", r.name, r.log()))
        .collect();
    let context = format!("{runs}\n{logs}");

    // The ledger.
    let out = tenure(&["cron", "history", ELECTION, "--backend", &url, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ledger: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    let decided = ledger["runs"].as_array().expect("runs");
    assert!(
        decided.len() >= 15,
        "too few slots decided: {ledger}\n{context}"
    );
    let mut slots = Vec::new();
    let mut attempts: BTreeMap<String, u64> = BTreeMap::new();
    for r in decided {
        assert_eq!(r["state"], "completed", "{r}\n{context}");
        assert_eq!(r["exit"], 0, "{r}");
        let slot = r["slot"].as_str().expect("slot").to_string();
        assert_eq!(
            r["run_id"].as_str(),
            Some(format!("{ELECTION}/{}", rfc3339(&slot)).as_str()),
            "{r}"
        );
        attempts.insert(rfc3339(&slot), r["attempt"].as_u64().expect("attempt"));
        slots.push(chrono::DateTime::parse_from_rfc3339(&slot).expect("an instant"));
    }
    // One second apart: none missed, none twice.
    for w in slots.windows(2) {
        assert_eq!(
            (w[1] - w[0]).num_seconds(),
            1,
            "a gap or a repeat at {w:?}\n{context}"
        );
    }
    assert_eq!(ledger["counts"]["missed"], 0, "{ledger}");
    assert!(
        ledger["counts"]["reruns"].as_u64().unwrap_or(0) >= 2,
        "the killed and the frozen holders' slots were rerun: {ledger}\n{context}"
    );

    eprintln!(
        "{} slots decided in a row, counts {}, {} commands started",
        slots.len(),
        ledger["counts"],
        runs.lines().filter(|l| l.starts_with("start ")).count()
    );

    // What the commands wrote: never two at once, and starts match the ledger.
    let mut last_line_of: BTreeMap<String, u128> = BTreeMap::new();
    let mut starts: Vec<(u128, String, String, u64)> = Vec::new(); // (ns, name, slot, attempt)
    let mut current: Option<String> = None;
    let mut order: Vec<String> = Vec::new();
    for l in runs.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let ns: u128 = f.last().and_then(|t| t.parse().ok()).expect("a timestamp");
        match f[0] {
            "start" => {
                // A start while another command's lines are still coming would show up as
                // interleaved lines below.
                let id = format!("{}#{}", f[1], starts.len());
                current = Some(id.clone());
                order.push(id.clone());
                assert_eq!(f[3], format!("{ELECTION}/{}", f[2]), "run id of {l}");
                starts.push((ns, f[1].into(), f[2].into(), f[4].parse().expect("attempt")));
                last_line_of.insert(id, ns);
            }
            "tick" | "end" => {
                let id = current.clone().expect("a line before any start");
                assert!(
                    id.starts_with(&format!("{}#", f[1])),
                    "{l}: a command of {} wrote while {id} ran\n{context}",
                    f[1]
                );
                last_line_of.insert(id, ns);
            }
            other => panic!("unexpected line {other}"),
        }
    }
    for w in order.windows(2) {
        let (prev, next) = (&w[0], &w[1]);
        let next_start = starts[next.split('#').nth(1).unwrap().parse::<usize>().unwrap()].0;
        assert!(
            last_line_of[prev] < next_start,
            "{next} started before {prev} wrote its last line\n{context}"
        );
    }
    // Every decided slot started exactly `attempt` times, with attempts 1, 2, …
    let mut by_slot: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (_, _, slot, attempt) in &starts {
        by_slot.entry(slot.clone()).or_default().push(*attempt);
    }
    for (slot, n) in &attempts {
        let seen = by_slot.get(slot).cloned().unwrap_or_default();
        assert_eq!(
            seen,
            (1..=*n).collect::<Vec<_>>(),
            "slot {slot}: attempts started vs the ledger's {n}\n{context}"
        );
    }
    let reruns: BTreeSet<&String> = attempts
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(s, _)| s)
        .collect();
    assert!(reruns.len() >= 2, "reruns {reruns:?}\n{context}");

    // Each runner's metrics file: together they count every completed slot once (the one
    // whose record the store took), and the frozen one counts its refused record.
    let metric = |file: &Path, name: &str| -> u64 {
        read(file)
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {}", read(file)))
    };
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("the directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "prom"))
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
    let completed: u64 = files
        .iter()
        .map(|f| {
            metric(
                f,
                "tenure_cron_slots_total{election=\"drill\",state=\"completed\"}",
            )
        })
        .sum();
    assert_eq!(
        Some(completed),
        ledger["counts"]["completed"].as_u64(),
        "{context}"
    );
    let frozen_prom = dir.path().join(format!("{frozen}.prom"));
    assert!(
        metric(&frozen_prom, "tenure_cron_records_refused_total") >= 1,
        "{}",
        read(&frozen_prom)
    );

    // The frozen holder woke up to find the store refusing its record.
    let frozen_log = replicas
        .iter()
        .find(|r| r.name == frozen)
        .expect("frozen")
        .log();
    assert!(
        frozen_log.contains("the ledger refused this holder's record"),
        "{frozen} was not refused\n{frozen_log}"
    );

    // The events every runner appended to one file: a `claimed` before every start of a
    // command (a claim without a start only for the last slot, whose command the final
    // SIGTERM may stop before its first line), and one `decided` per slot the ledger
    // decided, with the ledger's own record of it; the frozen holder's refused record is an
    // event too.
    let events: Vec<serde_json::Value> = read(&dir.path().join("events.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let of = |kind: &'static str| events.iter().filter(move |e| e["event"] == kind);
    let claims: BTreeSet<(String, u64, String)> = of("claimed")
        .map(|e| {
            let run = &e["run"];
            let slot = rfc3339(run["slot"].as_str().expect("a slot"));
            let attempt = run["attempt"].as_u64().expect("an attempt");
            (
                slot,
                attempt,
                run["holder"].as_str().expect("a holder").to_string(),
            )
        })
        .collect();
    let started: BTreeSet<(String, u64, String)> = starts
        .iter()
        .map(|(_, name, slot, attempt)| (rfc3339(slot), *attempt, name.clone()))
        .collect();
    assert!(
        started.is_subset(&claims),
        "starts without a claimed event: {:?}",
        started.difference(&claims).collect::<Vec<_>>()
    );
    let last = claims
        .iter()
        .map(|c| &c.0)
        .max()
        .cloned()
        .unwrap_or_default();
    assert!(
        claims.difference(&started).all(|c| c.0 == last),
        "claims without a start before the last slot: {:?}",
        claims.difference(&started).collect::<Vec<_>>()
    );
    let mut decided: BTreeMap<String, &serde_json::Value> = BTreeMap::new();
    for e in of("decided") {
        let slot = rfc3339(e["run"]["slot"].as_str().expect("a slot"));
        assert!(
            decided.insert(slot.clone(), &e["run"]).is_none(),
            "slot {slot} decided twice: {events:#?}"
        );
    }
    for r in ledger["runs"].as_array().expect("runs") {
        let slot = rfc3339(r["slot"].as_str().expect("slot"));
        assert_eq!(decided.get(&slot), Some(&r), "the event of slot {slot}");
    }
    assert!(
        of("refused").any(|e| e["holder"] == frozen.as_str()),
        "no refused event of {frozen}: {events:#?}"
    );
    let _ = killed;
}

/// `--max-runtime`: a command that outlives it is stopped and its slot recorded
/// `timed-out`, and the schedule goes on (one replica, `memory:`; its metrics file tells).
#[test]
fn a_command_past_its_max_runtime_is_stopped_and_its_slot_timed_out() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let prom = dir.path().join("cron.prom");
    let mut r = Spawned::new(
        Command::new(BIN)
            .args(["cron", "--election", "slow", "--backend", "memory:"])
            .args(["--schedule", "* * * * * *", "--max-runtime", "300ms"])
            .args(["--ttl", "2s", "--grace", "200ms", "--metrics-file"])
            .arg(&prom)
            .args(["--", "sleep", "30"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    std::thread::sleep(Duration::from_millis(3500));
    r.stop(Duration::from_secs(10));
    let text = read(&prom);
    let timed_out: u64 = text
        .lines()
        .find(|l| l.starts_with("tenure_cron_slots_total{election=\"slow\",state=\"timed-out\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        timed_out >= 2,
        "{timed_out} slots timed out in 3.5 s\n{text}"
    );
}

/// `--on-interrupt skip`: the slot whose holder was killed mid-run is recorded
/// `interrupted` by the next leader, never run again, and the schedule goes on.
#[test]
fn skip_records_the_killed_holders_slot_interrupted_and_goes_on() {
    let pg = tenure_testkit::services::Service::postgres_secure("cron-skip-password");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("runs");
    let start = |name: &str| {
        Spawned::new(
            Command::new(BIN)
                .args(["cron", "--election", "skipping", "--backend", &pg.url])
                .args(["--schedule", "* * * * * *", "--on-interrupt", "skip"])
                .args(["--ttl", "2s", "--grace", "500ms", "--value", name])
                .args(["--", "sh", "-c", SCRIPT, "sh", name])
                .arg(&file)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
    };
    let mut a = start("a");
    let mut b = start("b");
    let holder = running_now(&file, Duration::from_secs(15), &[]);
    let victim = if holder == "a" { &mut a } else { &mut b };
    victim.signal(libc::SIGKILL);
    victim.wait(Duration::from_secs(5));
    std::thread::sleep(Duration::from_secs(5));
    a.stop(Duration::from_secs(10));
    b.stop(Duration::from_secs(10));
    let out = tenure(&[
        "cron",
        "history",
        "skipping",
        "--backend",
        &pg.url,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ledger: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    let runs = ledger["runs"].as_array().expect("runs");
    let interrupted: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| r["state"] == "interrupted")
        .collect();
    assert_eq!(interrupted.len(), 1, "{ledger}\n{}", read(&file));
    assert_eq!(interrupted[0]["holder"], holder.as_str(), "{ledger}");
    assert!(
        runs.iter().all(|r| r["attempt"].as_u64() <= Some(1)),
        "nothing ran twice: {ledger}"
    );
    let after = runs
        .iter()
        .skip_while(|r| r["state"] != "interrupted")
        .filter(|r| r["state"] == "completed")
        .count();
    assert!(after >= 2, "slots after the interrupted one ran: {ledger}");
}

/// A PostgreSQL connection that the server ends (an administrator's
/// `pg_terminate_backend`, a restart) is opened again: the runner keeps its leadership or
/// campaigns again, and the schedule goes on without a missed slot; it exits only on the
/// signal that stops it.
#[test]
fn a_postgresql_connection_ended_by_the_server_is_opened_again_and_the_schedule_goes_on() {
    let pg = tenure_testkit::services::Service::postgres_secure("cron-reconnect-password");
    let mut r = Spawned::new(
        Command::new(BIN)
            .args(["cron", "--election", "reconnect", "--backend", &pg.url])
            .args([
                "--schedule",
                "* * * * * *",
                "--ttl",
                "3s",
                "--grace",
                "500ms",
            ])
            .args(["--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    std::thread::sleep(Duration::from_secs(3));
    // Several times, so that some end a query in flight (the server answers it FATAL
    // `terminating connection due to administrator command`) and some an idle connection.
    let mut ended = 0;
    for _ in 0..16 {
        ended += pg.terminate_clients();
        std::thread::sleep(Duration::from_millis(150));
    }
    // A round may find none: the runner opens its connection again only when it next asks.
    assert!(ended >= 3, "the runner's connections ended: {ended}");
    let cut = chrono::Utc::now();
    std::thread::sleep(Duration::from_secs(5));
    let status = r.stop(Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGTERM),
        "the runner exited before it was stopped: {status:?}"
    );
    let out = tenure(&[
        "cron",
        "history",
        "reconnect",
        "--backend",
        &pg.url,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ledger: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    assert_eq!(ledger["counts"]["missed"], 0, "{ledger}");
    let after = ledger["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["state"] == "completed")
        .filter(|r| {
            chrono::DateTime::parse_from_rfc3339(r["slot"].as_str().expect("slot"))
                .expect("an instant")
                > cut
        })
        .count();
    assert!(
        after >= 3,
        "slots completed after the connections ended: {after}\n{ledger}"
    );
}

/// `2026-12-07T12:00:01Z` from the ledger's own form (`+00:00` or `Z`).
fn rfc3339(s: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(s)
        .expect("an instant")
        .with_timezone(&chrono::Utc)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}
