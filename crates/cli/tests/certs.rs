//! `tenure certs` as a newcomer uses it: a new CA comes with an `admin` client, a second run
//! on the same directory adds clients and nodes from that CA, `--p12` writes a browser's
//! bundle with its password file, and a run that would add nothing says what to pass.

mod common;

use common::{stderr, stdout, tenure};

fn listed(out: &std::process::Output) -> Vec<String> {
    stdout(out)
        .lines()
        .map(|l| {
            std::path::Path::new(l)
                .file_name()
                .expect("a path")
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn a_new_ca_has_an_admin_and_later_runs_add_to_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("certs");
    let d = out_dir.to_str().expect("utf-8 path");

    let out = tenure(&["certs", "--out", d, "--clients", "app"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("a new CA needs the cluster's nodes"),
        "{}",
        stderr(&out)
    );
    assert!(!out_dir.join("ca.pem").exists());

    let out = tenure(&["certs", "--out", d, "--nodes", "1,2,3", "--clients", "app"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = listed(&out);
    for file in [
        "ca.pem",
        "client-app.pem",
        "client-admin.pem",
        "client-admin-key.pem",
        "node-3",
    ] {
        assert!(first.iter().any(|f| f == file), "{file} in {first:?}");
    }

    let out = tenure(&[
        "certs",
        "--out",
        d,
        "--nodes",
        "4",
        "--clients",
        "ops",
        "--p12",
        "ops",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let second = listed(&out);
    for file in [
        "node-4.pem",
        "client-ops.pem",
        "client-ops.p12",
        "client-ops.p12.password",
    ] {
        assert!(second.iter().any(|f| f == file), "{file} in {second:?}");
    }
    assert!(
        !second
            .iter()
            .any(|f| f == "ca.pem" || f == "client-admin.pem"),
        "nothing is issued twice: {second:?}"
    );
    assert!(
        stderr(&out).contains("import") && stderr(&out).contains("client-ops.p12.password"),
        "{}",
        stderr(&out)
    );

    let out = tenure(&["certs", "--out", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--nodes, --clients or --p12"),
        "{}",
        stderr(&out)
    );

    let out = tenure(&["certs", "--out", d, "--clients", "app"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("client-app.pem exists already"),
        "{}",
        stderr(&out)
    );
}
