//! The core is pure: no clock, no IO, no threads or locks, no unordered maps, no global
//! random generator (DESIGN "Parts", STYLE "The consensus core is pure"). The compiler cannot
//! say so, so this test reads the source and the manifest and names every file and line that
//! breaks the rule.
//!
//! Comments are not scanned: explaining why `HashMap` is banned is allowed.

use std::path::{Path, PathBuf};

/// A banned pattern and the reason it is banned, shown on failure.
const BANNED: &[(&str, &str)] = &[
    (
        "Instant::now",
        "reads the clock; time is ticks inside the core",
    ),
    (
        "SystemTime",
        "reads the wall clock; time is ticks inside the core",
    ),
    ("std::time", "clocks live at the edge (server, simulator)"),
    (
        "thread_rng",
        "global random generator; use the seeded ChaCha8Rng from Config.seed",
    ),
    (
        "rand::random",
        "global random generator; use the seeded ChaCha8Rng from Config.seed",
    ),
    ("from_entropy", "seeds from the OS; use Config.seed"),
    ("OsRng", "OS randomness; use Config.seed"),
    (
        "HashMap",
        "iteration order varies between runs; use BTreeMap",
    ),
    (
        "HashSet",
        "iteration order varies between runs; use BTreeSet",
    ),
    ("tokio::", "the core is sans-IO and single-threaded"),
    (
        "std::fs",
        "the driver persists; the core only says what to persist",
    ),
    (
        "std::net",
        "the driver sends; the core only says what to send",
    ),
    ("std::io", "the core does no IO"),
    ("std::thread", "the core is single-threaded"),
    ("std::process", "the core never exits or spawns"),
    ("std::env", "configuration comes in through Config"),
    ("Mutex", "the core is single-threaded; no locks"),
    ("RwLock", "the core is single-threaded; no locks"),
    ("thread_local!", "no hidden global state"),
    ("static mut", "no hidden global state"),
    ("println!", "the core does no IO; return effects instead"),
    ("eprintln!", "the core does no IO; return effects instead"),
    ("dbg!", "the core does no IO; return effects instead"),
];

/// The only crates the core may depend on (dev-dependencies are free). `imbl` gives the
/// state machine its copy-on-write ordered maps (`sm/cow.rs`): plain data structures, no IO,
/// no clock, no randomness, ordered iteration.
const ALLOWED_DEPENDENCIES: &[&str] = &[
    "serde",
    "bincode",
    "rand_core",
    "rand_chacha",
    "thiserror",
    "imbl",
];

/// One broken rule, at `line` (1-based) of a file.
#[derive(Debug, PartialEq, Eq)]
struct Violation {
    line: usize,
    pattern: &'static str,
    why: &'static str,
}

/// The code part of a line: everything before a `//` that is not inside a string literal.
fn code_part(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut k = 0;
    while k < bytes.len() {
        match bytes[k] {
            b'\\' if in_string => k += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(k + 1) == Some(&b'/') => return &line[..k],
            _ => {}
        }
        k += 1;
    }
    line
}

/// Every banned pattern in `source`, line by line. Grouped imports such as
/// `use std::{fs, net::TcpStream}` are expanded so that they cannot hide a module.
fn scan(source: &str) -> Vec<Violation> {
    let mut found = Vec::new();
    for (k, raw) in source.lines().enumerate() {
        let code = code_part(raw);
        let mut text = code.replace(' ', "");
        if let Some(start) = text.find("std::{") {
            let inner = &text[start + "std::{".len()..];
            let inner = inner.split('}').next().unwrap_or(inner);
            let expanded: Vec<String> = inner.split(',').map(|p| format!("std::{p}")).collect();
            text.push(' ');
            text.push_str(&expanded.join(" "));
        }
        for (pattern, why) in BANNED {
            let needle = pattern.replace(' ', "");
            if text.contains(&needle) {
                found.push(Violation {
                    line: k + 1,
                    pattern,
                    why,
                });
            }
        }
    }
    found
}

/// The names of every non-dev dependency in a Cargo manifest: `[dependencies]`,
/// `[build-dependencies]`, target-specific tables, and `[dependencies.NAME]` tables.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_table = false;
    for raw in manifest.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']');
            let is_deps = |h: &str| h == "dependencies" || h == "build-dependencies";
            let last = header.rsplit('.').next().unwrap_or(header);
            // `[dependencies.serde]`, `[target.'cfg(unix)'.dependencies]`, `[dependencies]`.
            if let Some(name) = header
                .strip_prefix("dependencies.")
                .or_else(|| header.strip_prefix("build-dependencies."))
            {
                names.push(name.trim_matches('"').to_owned());
                in_table = false;
            } else {
                in_table = is_deps(header) || (header.starts_with("target.") && is_deps(last));
            }
            continue;
        }
        if in_table && !line.is_empty() {
            let key = line.split(['=', '.']).next().unwrap_or("").trim();
            names.push(key.trim_matches('"').to_owned());
        }
    }
    names
}

fn crate_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
    )
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn core_sources_use_no_banned_api() {
    let mut files = Vec::new();
    rust_files(&crate_dir().join("src"), &mut files);
    assert!(files.len() >= 5, "found only {files:?}");
    let mut report = String::new();
    for file in &files {
        let source = std::fs::read_to_string(file).expect("readable source");
        let shown = file.strip_prefix(crate_dir()).unwrap_or(file);
        for v in scan(&source) {
            report.push_str(&format!(
                "crates/core/{}:{}: `{}`: {}\n",
                shown.display(),
                v.line,
                v.pattern,
                v.why
            ));
        }
    }
    assert!(report.is_empty(), "the core must stay pure:\n{report}");
}

#[test]
fn core_depends_only_on_allowed_crates() {
    let manifest =
        std::fs::read_to_string(crate_dir().join("Cargo.toml")).expect("readable manifest");
    let deps = dependencies(&manifest);
    assert!(deps.contains(&"serde".to_owned()), "parsed {deps:?}");
    let extra: Vec<&String> = deps
        .iter()
        .filter(|d| !ALLOWED_DEPENDENCIES.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "crates/core/Cargo.toml: dependencies outside the allow-list {ALLOWED_DEPENDENCIES:?}: \
         {extra:?} (a test-only crate belongs in [dev-dependencies])"
    );
}

// ----- the checks can fail -------------------------------------------------------------------

#[test]
fn the_scan_finds_a_banned_call_and_names_its_line() {
    let source = "fn f() {\n    let t = std::time::Instant::now();\n}\n";
    let found = scan(source);
    let patterns: Vec<&str> = found.iter().map(|v| v.pattern).collect();
    assert_eq!(patterns, vec!["Instant::now", "std::time"]);
    assert!(found.iter().all(|v| v.line == 2));
}

#[test]
fn the_scan_sees_through_grouped_imports_and_aliases() {
    let found =
        scan("use std::{collections::BTreeMap, fs};\nuse std::collections::HashMap as M;\n");
    let got: Vec<(usize, &str)> = found.iter().map(|v| (v.line, v.pattern)).collect();
    assert_eq!(got, vec![(1, "std::fs"), (2, "HashMap")]);
    assert_eq!(
        scan("let r = rand::random::<u64>();")[0].pattern,
        "rand::random"
    );
    assert_eq!(scan("let m = Mutex::new(0);")[0].pattern, "Mutex");
}

#[test]
fn the_scan_ignores_comments_but_not_strings_before_them() {
    assert!(scan("// HashMap would be nondeterministic here.\n").is_empty());
    assert!(scan("/// Never `Instant::now()`: time is ticks.\n").is_empty());
    let found = scan("let url = \"http://x\"; let m = HashMap::new(); // why\n");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].pattern, "HashMap");
}

#[test]
fn the_manifest_check_finds_a_forbidden_dependency() {
    let manifest = r#"
[package]
name = "tenure-core"

[dependencies]
serde.workspace = true
tokio = { version = "1", features = ["full"] }

[dependencies.parking_lot]
version = "0.12"

[target.'cfg(unix)'.dependencies]
libc = "0.2"

[dev-dependencies]
proptest = "1"
"#;
    let deps = dependencies(manifest);
    assert_eq!(deps, vec!["serde", "tokio", "parking_lot", "libc"]);
    let extra: Vec<&String> = deps
        .iter()
        .filter(|d| !ALLOWED_DEPENDENCIES.contains(&d.as_str()))
        .collect();
    assert_eq!(extra, vec!["tokio", "parking_lot", "libc"]);
}
