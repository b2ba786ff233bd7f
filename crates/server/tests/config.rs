//! Bad numbers on the command line are refused at start with the field named and exit
//! status 2: no panic, no overflow, nothing opened (the data directory is never created).

use tenure_testkit::*;

#[test]
fn out_of_range_flags_exit_2_naming_the_field_and_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let cases: [(&[&str], &str); 6] = [
        (
            &["--election-timeout-ms", "18446744073709551610"],
            "election_timeout_ms",
        ),
        (&["--ttl-max-ms", "18446744073709551615"], "ttl_max_ms"),
        (&["--heartbeat-ms", "0"], "heartbeat_ms"),
        (
            &["--request-timeout-ms", "18446744073709551615"],
            "request_timeout_ms",
        ),
        (&["--cluster-id", ""], "cluster_id"),
        (&["--idle-timeout-ms", "1"], "idle_timeout_ms"),
    ];
    for (flags, field) in cases {
        let (code, _, stderr) = server_refusing_to_start(&data, flags);
        assert_eq!(code, Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(field), "{flags:?} names {field}: {stderr}");
        assert!(!stderr.contains("panicked"), "{flags:?}: {stderr}");
        assert!(!data.exists(), "{flags:?} created the data directory");
    }
}
