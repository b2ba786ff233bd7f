//! The worked examples of issue 12 ("Done when": `tenure plan` golden tests reproduce the
//! seeds' numbers), as whole reports and as numbers.

use std::time::Duration;

use expect_test::expect;
use tenure_plan::{human, Given, Input, Inputs, Plan, Rule, Source, Value, PERMILLE};

fn ms(n: u64) -> Value {
    Value::Duration(Duration::from_millis(n))
}

fn plan(pairs: &[(Input, Value)]) -> Plan {
    let mut g = Given::default();
    for (i, v) in pairs {
        g.set(*i, *v, Source::Flag).expect("valid input");
    }
    Plan::new(Inputs::resolve(&g).expect("resolves"))
}

/// Heartbeat 1 s × 5 missed + 0.3 s campaign + 2 s warm-up.
fn the_7_3_s_example() -> Plan {
    plan(&[
        (Input::Heartbeat, ms(1_000)),
        (Input::MissedBeats, Value::Count(5)),
        (Input::Campaign, ms(300)),
        (Input::WarmUp, ms(2_000)),
    ])
}

/// Heartbeat 1 s × 5 missed + 0.3 s campaign + 2 s warm-up = 7.3 s.
#[test]
fn heartbeat_1s_times_5_missed_plus_campaign_and_warm_up_is_7_3_s() {
    let p = the_7_3_s_example();
    assert_eq!(p.raft_rule_of_thumb, Duration::from_millis(7_300));
    assert!(p.rules_hold());
    expect![[r#"
        Inputs
          heartbeat          1 s       flag
          missed beats       5         flag
          election timeout   5 s       derived: missed beats × heartbeat
          campaign           300 ms    flag
          warm-up            2 s       flag
          TTL                10 s      default: tenure campaign's and run's --ttl
          renew interval     2.5 s     default: TTL/4, what the tenure client does
          network p99        10 ms     assumed, not measured: a local network (give --network-p99, or --from a node)
          app pause          50 ms     assumed: give --app-pause-budget, the holder's longest GC or VM pause
          server pause       50 ms     assumed: give --server-pause-budget, a server's longest VM stall or swap
          scheduling jitter  10 ms     assumed: give --scheduling-jitter, how late timers fire under load
          clock skew         210 ms    default: the client's drift margin, 2 × 1% of the TTL + 10 ms
          holders            1         default
          cluster size       3         default

        Rules
          ok     beats: election timeout 5 s ≥ missed beats × heartbeat = 5 × 1 s = 5 s
          ok     leader-pause: election timeout 5 s > heartbeat + network p99 + server pause + scheduling jitter = 1 s + 10 ms + 50 ms + 10 ms = 1.07 s
          ok     lease-pause: TTL 10 s > renew interval + network p99 + app pause + clock skew = 2.5 s + 10 ms + 50 ms + 210 ms = 2.77 s

        Failover when the Raft leader crashes (detection + campaign + warm-up)
          rule of thumb  missed beats × heartbeat + campaign + warm-up = 5 × 1 s + 300 ms + 2 s = 7.3 s
          best           6.3 s     the crash just before a heartbeat was due, a follower drawing the shortest timeout (5 s)
          average        8.467 s   anywhere between heartbeats, the earliest of 2 followers' timeouts drawn from [5 s, 10 s)
          worst          12.3 s    the crash just after a heartbeat, every timeout close to 10 s

        Failover when a lease holder crashes (expiry + notification + warm-up)
          best           9.52 s    the crash just before a renewal: TTL − renew interval = 7.5 s left
          average        10.77 s   anywhere between renewals: TTL − renew interval/2 = 8.75 s left on average
          worst          12.02 s   the crash just after a renewal: the whole TTL, 10 s, left
          notification   20 ms: the expiry committed and the next candidate woken (2 × network p99)

        A pause of each budget
          Raft leader    paused 50 ms: never starts an election; safe up to 3.98 s, an election from 10 s on
          lease holder   paused 50 ms: never costs a live holder its lease; safe up to 7.28 s, fatal above 9.78 s

        Traffic
          renewals       0.4/s per holder (every 2.5 s), 0.4/s for 1 holder
          heartbeats     2/s from the Raft leader (2 followers every 1 s)

        Cluster
          3 voters: a quorum is 2, 1 member may fail

        Warnings
          - assumed, not measured or given: network p99, app pause, server pause, scheduling jitter; measure with --from URL or give them

        Verdict: every rule holds.
    "#]]
    .assert_eq(&p.text());
}

/// TTL 10 s renewed every 3 s: the worst case is close to 10 s. The average is TTL minus
/// half a renew interval plus the notification (8.5 s + 20 ms here), not the seeds' "about
/// half a TTL": a lease renewed every 3 s has between 7 s and 10 s left when its holder
/// crashes. Half a TTL is the average only for a lease that is never renewed.
#[test]
fn ttl_10s_renewed_every_3s_fails_over_in_at_most_about_10s() {
    let p = plan(&[
        (Input::Ttl, ms(10_000)),
        (Input::RenewInterval, ms(3_000)),
        (Input::NetworkP99, ms(10)),
        (Input::WarmUp, ms(0)),
    ]);
    let f = p.lease_crash;
    assert_eq!(p.notification, Duration::from_millis(20));
    assert_eq!(f.worst, Duration::from_millis(10_020), "close to 10 s");
    assert_eq!(f.average, Duration::from_millis(8_520));
    assert_eq!(f.best, Duration::from_millis(7_020));
    assert!(p.rules_hold());
    expect![[r#"
        Inputs
          heartbeat          30 ms     default: the server's heartbeat_ms
          missed beats       5         derived: whole heartbeats in the election timeout
          election timeout   150 ms    default: the server's election_timeout_ms
          campaign           40 ms     derived: pre-vote and vote, two round trips of the network p99
          warm-up            0 s       flag
          TTL                10 s      flag
          renew interval     3 s       flag
          network p99        10 ms     flag
          app pause          50 ms     assumed: give --app-pause-budget, the holder's longest GC or VM pause
          server pause       50 ms     assumed: give --server-pause-budget, a server's longest VM stall or swap
          scheduling jitter  10 ms     assumed: give --scheduling-jitter, how late timers fire under load
          clock skew         210 ms    default: the client's drift margin, 2 × 1% of the TTL + 10 ms
          holders            1         default
          cluster size       3         default

        Rules
          ok     beats: election timeout 150 ms ≥ missed beats × heartbeat = 5 × 30 ms = 150 ms
          ok     leader-pause: election timeout 150 ms > heartbeat + network p99 + server pause + scheduling jitter = 30 ms + 10 ms + 50 ms + 10 ms = 100 ms
          ok     lease-pause: TTL 10 s > renew interval + network p99 + app pause + clock skew = 3 s + 10 ms + 50 ms + 210 ms = 3.27 s

        Failover when the Raft leader crashes (detection + campaign + warm-up)
          rule of thumb  missed beats × heartbeat + campaign + warm-up = 5 × 30 ms + 40 ms + 0 s = 190 ms
          best           160 ms    the crash just before a heartbeat was due, a follower drawing the shortest timeout (150 ms)
          average        225 ms    anywhere between heartbeats, the earliest of 2 followers' timeouts drawn from [150 ms, 300 ms)
          worst          340 ms    the crash just after a heartbeat, every timeout close to 300 ms

        Failover when a lease holder crashes (expiry + notification + warm-up)
          best           7.02 s    the crash just before a renewal: TTL − renew interval = 7 s left
          average        8.52 s    anywhere between renewals: TTL − renew interval/2 = 8.5 s left on average
          worst          10.02 s   the crash just after a renewal: the whole TTL, 10 s, left
          notification   20 ms: the expiry committed and the next candidate woken (2 × network p99)

        A pause of each budget
          Raft leader    paused 50 ms: never starts an election; safe up to 100 ms, an election from 300 ms on
          lease holder   paused 50 ms: never costs a live holder its lease; safe up to 6.78 s, fatal above 9.78 s

        Traffic
          renewals       0.333/s per holder (every 3 s), 0.333/s for 1 holder
          heartbeats     66.667/s from the Raft leader (2 followers every 30 ms)

        Cluster
          3 voters: a quorum is 2, 1 member may fail

        Warnings
          - assumed, not measured or given: app pause, server pause, scheduling jitter; measure with --from URL or give them

        Verdict: every rule holds.
    "#]]
    .assert_eq(&p.text());
}

/// A 2 s TTL renewed every 600 ms sends exactly 5× the renewals of a 10 s TTL renewed every
/// 3 s (1.667/s against 0.333/s per holder: 3 s / 600 ms = 5), and one 2.5 s pause costs a
/// live holder its lease wherever the pause falls.
#[test]
fn ttl_2s_renewed_every_600ms_costs_5x_the_renewals_and_dies_of_one_2_5s_pause() {
    // The seeds' question is about the application's GC: the holder's pause budget.
    let common = [
        (Input::NetworkP99, ms(10)),
        (Input::AppPauseBudget, ms(2_500)),
    ];
    let short = plan(&[
        (Input::Ttl, ms(2_000)),
        (Input::RenewInterval, ms(600)),
        common[0],
        common[1],
    ]);
    let long = plan(&[(Input::Ttl, ms(10_000)), (Input::RenewInterval, ms(3_000))]);
    assert_eq!(short.renewals_relative_to(&long), 5 * u128::from(PERMILLE));
    assert_eq!(short.traffic.per_holder_milli, 1_667);
    assert_eq!(long.traffic.per_holder_milli, 333);

    assert_eq!(short.lease_pause.false_failover_permille, PERMILLE);
    assert_eq!(human(short.lease_pause.always_above), "1.94 s");
    let lease = short
        .rules
        .iter()
        .find(|r| r.rule == Rule::LeasePause)
        .expect("checked");
    assert!(!lease.holds);
    assert!(!short.rules_hold());
    expect![[r#"
        Inputs
          heartbeat          30 ms     default: the server's heartbeat_ms
          missed beats       5         derived: whole heartbeats in the election timeout
          election timeout   150 ms    default: the server's election_timeout_ms
          campaign           40 ms     derived: pre-vote and vote, two round trips of the network p99
          warm-up            0 s       assumed: none (give --warm-up, what your application needs)
          TTL                2 s       flag
          renew interval     600 ms    flag
          network p99        10 ms     flag
          app pause          2.5 s     flag
          server pause       50 ms     assumed: give --server-pause-budget, a server's longest VM stall or swap
          scheduling jitter  10 ms     assumed: give --scheduling-jitter, how late timers fire under load
          clock skew         50 ms     default: the client's drift margin, 2 × 1% of the TTL + 10 ms
          holders            1         default
          cluster size       3         default

        Rules
          ok     beats: election timeout 150 ms ≥ missed beats × heartbeat = 5 × 30 ms = 150 ms
          ok     leader-pause: election timeout 150 ms > heartbeat + network p99 + server pause + scheduling jitter = 30 ms + 10 ms + 50 ms + 10 ms = 100 ms
          FAILS  lease-pause: TTL 2 s > renew interval + network p99 + app pause + clock skew = 600 ms + 10 ms + 2.5 s + 50 ms = 3.16 s
                 -> a holder that pauses 2.5 s just before it renews loses its lease while alive (a false failover): raise --ttl above 3.16 s (no renew interval is short enough: network p99 + app pause + clock skew = 2.56 s leave nothing of the 2 s TTL)

        Failover when the Raft leader crashes (detection + campaign + warm-up)
          rule of thumb  missed beats × heartbeat + campaign + warm-up = 5 × 30 ms + 40 ms + 0 s = 190 ms
          best           160 ms    the crash just before a heartbeat was due, a follower drawing the shortest timeout (150 ms)
          average        225 ms    anywhere between heartbeats, the earliest of 2 followers' timeouts drawn from [150 ms, 300 ms)
          worst          340 ms    the crash just after a heartbeat, every timeout close to 300 ms

        Failover when a lease holder crashes (expiry + notification + warm-up)
          best           1.42 s    the crash just before a renewal: TTL − renew interval = 1.4 s left
          average        1.72 s    anywhere between renewals: TTL − renew interval/2 = 1.7 s left on average
          worst          2.02 s    the crash just after a renewal: the whole TTL, 2 s, left
          notification   20 ms: the expiry committed and the next candidate woken (2 × network p99)

        A pause of each budget
          Raft leader    paused 50 ms: never starts an election; safe up to 100 ms, an election from 300 ms on
          lease holder   paused 2.5 s: always costs a live holder its lease (a false failover); safe up to 1.34 s, fatal above 1.94 s
                         failover after such a pause: as after a crash at its start

        Traffic
          renewals       1.667/s per holder (every 600 ms), 1.667/s for 1 holder
          heartbeats     66.667/s from the Raft leader (2 followers every 30 ms)

        Cluster
          3 voters: a quorum is 2, 1 member may fail

        Warnings
          - assumed, not measured or given: server pause, scheduling jitter, warm-up; measure with --from URL or give them

        Verdict: 1 rule fails: lease-pause.
    "#]]
    .assert_eq(&short.text());
}

/// The JSON report: durations in microseconds, sources named.
#[test]
fn json_report_of_the_7_3_s_example() {
    let p = the_7_3_s_example();
    let j = p.json();
    assert_eq!(j["ok"], true);
    assert_eq!(j["raft_crash"]["rule_of_thumb_us"], 7_300_000);
    assert_eq!(j["inputs"]["heartbeat"]["value_us"], 1_000_000);
    assert_eq!(j["inputs"]["heartbeat"]["source"], "flag");
    assert_eq!(j["inputs"]["election_timeout"]["source"], "default");
    assert_eq!(
        j["inputs"]["election_timeout"]["from"],
        "derived: missed beats × heartbeat"
    );
    assert_eq!(j["inputs"]["missed_beats"]["value"], 5);
    assert_eq!(j["rules"][0]["rule"], "beats");
}
