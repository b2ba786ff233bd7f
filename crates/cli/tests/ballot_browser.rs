//! The ballot page in headless Chromium (tests/browser/ballot.mjs): a real `tenure ballot`
//! process on a free port, driven through its buttons. Needs Debian's chromium and the
//! npm package playwright-core: `scripts/services.sh install-browser` (scripts/test.sh runs
//! it), so a missing browser fails here rather than skipping.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn ballot_page_plays_the_split_vote_bully_and_share_link_in_chromium() {
    // Also: refusals explained and disabled buttons, a scenario stepped one step at a time,
    // and the established start at term 41 (see the script's header).
    let browser_dir = repo().join("tests/browser");
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists()
            && browser_dir.join("node_modules/playwright-core").exists(),
        "the browser tests need chromium and playwright-core: run scripts/services.sh install-browser"
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["ballot", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tenure ballot");
    let stdout = child.stdout.take().expect("piped");
    let server = Killed(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the address line");
    let url = line
        .trim()
        .strip_prefix("ballot: ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    let out = Command::new("node")
        .arg(browser_dir.join("ballot.mjs"))
        .arg(&url)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    drop(server);
    assert!(
        out.status.success(),
        "ballot.mjs failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for shot in [
        "ballot-refusal",
        "ballot-step-through",
        "ballot-term41",
        "ballot-split-vote",
        "ballot-bully-partition",
        "ballot-share-link",
    ] {
        assert!(
            stdout.contains(&format!("{shot}.png")),
            "no screenshot {shot} in:\n{stdout}"
        );
    }
    assert!(stdout.contains("browser test passed"));
}
