//! ARCHITECTURE.md is the workspace's map: these tests keep it a true one. Every crate has
//! its section, headed by its directory and package name, and no section names a crate that
//! is not there; every file or directory it names in backticks exists (looked up from the
//! workspace, from the section's crate and from that crate's `src/`); and it stays short
//! enough to be read as a map.

mod common;

use common::workspace;
use std::collections::BTreeMap;
use std::path::PathBuf;

const WORDS_MAX: usize = 2_500;

fn map() -> String {
    std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md")
}

/// Each crate directory under `crates/` and its package name.
fn crates() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(workspace().join("crates")).expect("read crates/") {
        let dir = entry.expect("a directory entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_string())
            .expect("a package name");
        let dir = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .to_string();
        out.insert(dir, name);
    }
    out
}

/// The crate sections: `(directory, package)` from headings "### `crates/D` (`P`…".
fn sections(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String, String)> = None;
    for line in text.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            out.extend(current.take());
        }
        if let Some(rest) = line.strip_prefix("### `crates/") {
            let (dir, rest) = rest.split_once('`').expect("a closing backtick");
            let package = rest
                .split('`')
                .nth(1)
                .unwrap_or_else(|| panic!("the heading of crates/{dir} names no package"));
            current = Some((dir.to_string(), package.to_string(), String::new()));
        } else if let Some((_, _, body)) = &mut current {
            body.push_str(line);
            body.push('\n');
        }
    }
    out.extend(current);
    out
}

#[test]
fn every_crate_has_its_section_and_every_section_a_crate() {
    let text = map();
    let named: BTreeMap<String, String> = sections(&text)
        .into_iter()
        .map(|(dir, package, _)| (dir, package))
        .collect();
    assert_eq!(
        named,
        crates(),
        "ARCHITECTURE.md's crate sections (left) differ from the crates under crates/ (right)"
    );
}

#[test]
fn every_path_it_names_exists() {
    let root = workspace();
    let text = map();
    let looks_like_a_path = |t: &str| {
        !t.contains([' ', ':'])
            && !t.starts_with('.')
            && (t.ends_with('/')
                || [
                    ".rs", ".md", ".toml", ".sh", ".py", ".yml", ".json", ".proto",
                ]
                .iter()
                .any(|ext| t.ends_with(ext)))
    };
    let mut missing = Vec::new();
    let mut checked = 0;
    let mut check = |body: &str, bases: &[PathBuf]| {
        for token in body.split('`').skip(1).step_by(2) {
            if !looks_like_a_path(token) {
                continue;
            }
            checked += 1;
            if !bases.iter().any(|b| b.join(token).exists()) {
                missing.push(token.to_string());
            }
        }
    };
    for (dir, _, body) in sections(&text) {
        let krate = root.join("crates").join(&dir);
        check(&body, &[root.clone(), krate.join("src"), krate]);
    }
    // Outside the crate sections, paths are the workspace's.
    let outside: String = text
        .split("\n### ")
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part
            } else {
                part.split_once("\n## ").map_or("", |(_, rest)| rest)
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    check(&outside, std::slice::from_ref(&root));
    assert!(
        checked > 20,
        "only {checked} paths found: is the parser still reading the map?"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn it_stays_a_map() {
    let words = map().split_whitespace().count();
    assert!(
        words <= WORDS_MAX,
        "ARCHITECTURE.md has {words} words; a map has at most {WORDS_MAX}"
    );
}
