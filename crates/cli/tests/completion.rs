//! `tenure completion bash|zsh|fish`: a script naming every public subcommand and none of
//! the internal ones; bash's parses; an unknown shell is a bad argument (exit 2).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

fn completion(shell: &str) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(["completion", shell])
        .output()
        .expect("run tenure completion");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn each_shell_gets_a_script_of_the_public_subcommands() {
    for (shell, marker) in [
        ("bash", "complete -F _tenure"),
        ("zsh", "#compdef tenure"),
        ("fish", "complete -c tenure"),
    ] {
        let (code, script, stderr) = completion(shell);
        assert_eq!(code, Some(0), "{shell}: {stderr}");
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for public in [
            "campaign",
            "observe",
            "leader",
            "run",
            "server",
            "completion",
        ] {
            assert!(script.contains(public), "{shell}: {public} missing");
        }
        for internal in ["run-guard", "demo-worker"] {
            assert!(!script.contains(internal), "{shell}: offers {internal}");
        }
    }
}

#[test]
fn the_bash_script_parses() {
    let (_, script, _) = completion("bash");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tenure.bash");
    std::fs::write(&path, script).expect("write the script");
    let status = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .status()
        .expect("run bash -n");
    assert!(status.success(), "bash -n refused the script");
}

#[test]
fn an_unknown_shell_is_a_bad_argument() {
    let (code, script, stderr) = completion("powershell");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(script.is_empty());
    assert!(stderr.contains("bash, zsh, fish"), "{stderr}");
}
