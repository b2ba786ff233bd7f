//! Auth files (`--auth-file`) with real bearer tokens made by `tenure token`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use crate::binary::{outcome, tenure_binary};

/// An auth file (`--auth-file`) in a temporary directory of its own, with a new bearer
/// token for each principal it names under `[tokens]`, and room beside it for the token
/// files a test hands to clients. Removed when dropped.
pub struct AuthFile {
    dir: tempfile::TempDir,
    pub(crate) tokens: BTreeMap<String, String>,
}

impl AuthFile {
    /// `policy` (the file's principals, roles and grants) and a `[tokens]` table with a
    /// token for each of `principals`, each made as an operator makes one (`tenure token`).
    pub fn new(policy: &str, principals: &[&str]) -> AuthFile {
        let mut text = policy.to_string();
        let mut tokens = BTreeMap::new();
        if !principals.is_empty() {
            text.push_str("\n[tokens]\n");
        }
        for principal in principals {
            let (code, token, said) =
                outcome(Command::new(tenure_binary()).args(["token", principal]));
            assert_eq!(code, Some(0), "tenure token {principal}: {said}");
            // Its stderr ends with the line for the auth file.
            let line = said
                .lines()
                .find(|l| l.starts_with(&format!("{principal} = ")))
                .unwrap_or_else(|| {
                    panic!("tenure token {principal} gave no auth-file line: {said}")
                });
            text.push_str(line);
            text.push('\n');
            tokens.insert(principal.to_string(), token.trim().to_string());
        }
        let dir = tempfile::tempdir().expect("create a temporary directory");
        std::fs::write(dir.path().join("auth.toml"), text).expect("write the auth file");
        AuthFile { dir, tokens }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("auth.toml")
    }

    /// The bearer token of `principal`.
    pub fn token(&self, principal: &str) -> &str {
        self.tokens
            .get(principal)
            .unwrap_or_else(|| panic!("the auth file has no token for {principal}"))
    }

    /// `contents` as the file `name` beside the auth file; returns its path.
    pub fn beside(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}
