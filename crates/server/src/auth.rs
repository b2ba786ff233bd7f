//! Who a client is, and what it may do.
//!
//! A client authenticates with a client certificate from the cluster's CA (its principal is
//! the `<name>` of `client-<name>.<cluster>.tenure`) or with a bearer token
//! (`authorization: Bearer <token>`), which the auth file maps to a principal by its SHA-256
//! hash: the server never holds a token itself. A principal has roles and grants:
//!
//! - `admin`: everything, including membership changes and moving Raft leadership;
//! - `observer`: reads everything (who leads, observe, fenced keys, status, `/metrics` and
//!   `/status` on the HTTP port) and changes nothing;
//! - grants on name prefixes: `campaign` (campaign, resign, transfer in elections under the
//!   prefix), `observe` (who leads, observe), `read` (get fenced keys), `write` (fenced
//!   puts). A principal with a `campaign` or `write` grant may hold sessions.
//!
//! Where the policy comes from: the auth file if one is configured; otherwise, with TLS on,
//! the default policy (the `admin_clients` are admins, every other client certificate of
//! the cluster may campaign, observe, read and write everywhere and is an observer, and a
//! client without a certificate is refused); with neither, nobody is authenticated and everything is
//! allowed, which the server says loudly at start.
//!
//! The auth file (TOML):
//!
//! ```toml
//! [principals.admin]
//! roles = ["admin"]
//!
//! [principals.billing]
//! grants = [{ prefix = "billing/", allow = ["campaign", "observe", "read", "write"] }]
//!
//! [principals.grafana]
//! roles = ["observer"]
//!
//! [tokens]
//! # principal = "sha256:<hex of the token's SHA-256>", from `tenure token NAME`,
//! # or a list of them while clients move from an old token to a new one
//! grafana = "sha256:…"
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::Digest as _;
use tenure_transport::tls::client_principal;
use tokio_rustls::rustls::pki_types::CertificateDer;

use crate::metrics::Metrics;

/// What a grant allows under its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Campaign, resign and transfer in elections whose name starts with the prefix.
    Campaign,
    /// Ask who leads and observe elections whose name starts with the prefix.
    Observe,
    /// Get fenced keys that start with the prefix.
    Read,
    /// Put fenced keys that start with the prefix.
    Write,
}

/// A role: a set of rights not tied to names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything.
    Admin,
    /// Every read, no change.
    Observer,
}

/// One grant: `allow` on every name that starts with `prefix` (`""`: every name).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Names this grant covers start with this.
    pub prefix: String,
    /// What it allows there.
    pub allow: BTreeSet<Permission>,
}

/// What one principal may do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rights {
    /// Roles.
    #[serde(default)]
    pub roles: BTreeSet<Role>,
    /// Grants on name prefixes.
    #[serde(default)]
    pub grants: Vec<Grant>,
    /// This principal's shares of the node's pools, where they differ from the server's
    /// defaults.
    #[serde(default)]
    pub quotas: Quotas,
}

/// A principal's shares of a node's pools (`None`: the server's default share).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// KeepAlive streams open at once on one node.
    pub keepalive_streams: Option<usize>,
    /// Observe streams open at once on one node.
    pub observe_streams: Option<usize>,
    /// Live sessions owned in the cluster.
    pub sessions: Option<u64>,
    /// Elections created (and not deleted) in the cluster.
    pub elections: Option<u64>,
    /// Fenced keys written last in the cluster.
    pub keys: Option<u64>,
    /// Bytes (names plus values) of those keys.
    pub key_bytes: Option<u64>,
    /// Unary calls per second on one node.
    pub requests_per_second: Option<u32>,
}

impl Rights {
    fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    fn granted(&self, permission: Permission, name: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.allow.contains(&permission) && name.starts_with(g.prefix.as_str()))
    }

    /// Whether these rights allow `action`.
    pub fn allow(&self, action: &Action<'_>) -> bool {
        if self.has(Role::Admin) {
            return true;
        }
        let observer = self.has(Role::Observer);
        match *action {
            Action::Admin => false,
            Action::Status => true,
            Action::Members => true,
            Action::Metrics => observer,
            Action::Session => self.grants.iter().any(|g| {
                g.allow.contains(&Permission::Campaign) || g.allow.contains(&Permission::Write)
            }),
            Action::Campaign(election) => self.granted(Permission::Campaign, election),
            Action::Observe(election) => observer || self.granted(Permission::Observe, election),
            Action::Read(key) => observer || self.granted(Permission::Read, key),
            // The token a fenced write carries is the election's: writing with it is part of
            // holding its leadership, and a caller without that right learns nothing about
            // the election's tokens from the answer (refused before anything is looked up).
            Action::Write { key, election } => {
                self.granted(Permission::Write, key) && self.granted(Permission::Campaign, election)
            }
        }
    }
}

/// What a request asks to do, with the name it is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Grant, keep alive or revoke a session.
    Session,
    /// Campaign, resign or transfer in an election.
    Campaign(&'a str),
    /// Who leads an election, observe it.
    Observe(&'a str),
    /// Get a fenced key.
    Read(&'a str),
    /// Put a fenced key, fenced by an election's token: `write` on the key and `campaign` in
    /// the election.
    Write {
        /// The key.
        key: &'a str,
        /// The election whose token fences the write.
        election: &'a str,
    },
    /// The cluster's status (every authenticated principal).
    Status,
    /// The cluster's member list with client addresses (every authenticated principal:
    /// a client given one node's address needs it to find the others).
    Members,
    /// `/metrics` and `/status` on the HTTP port (observers and admins).
    Metrics,
    /// Membership changes, leadership transfer.
    Admin,
}

impl Action<'_> {
    /// How a denial names what was asked.
    pub fn describe(&self) -> String {
        match self {
            Action::Session => "hold sessions (what a campaign or a write grant needs)".into(),
            Action::Campaign(e) => format!("campaign in election {e:?}"),
            Action::Observe(e) => format!("observe election {e:?}"),
            Action::Read(k) => format!("read key {k:?}"),
            Action::Write { key, election } => {
                format!("write key {key:?} fenced by election {election:?}")
            }
            Action::Status => "read the cluster's status".into(),
            Action::Members => "read the cluster's member list".into(),
            Action::Metrics => "read metrics, status and the lists (the observer role)".into(),
            Action::Admin => {
                "change the membership, move leadership or take backups (the admin role)".into()
            }
        }
    }
}

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// Authentication is off: nobody is identified and everything is allowed.
    Anyone,
    /// An authenticated principal, by name.
    Named(String),
}

/// Why a request was not let through.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No credentials, or credentials that prove nothing (UNAUTHENTICATED).
    #[error("{0}")]
    Unauthenticated(String),
    /// An authenticated principal without the right (PERMISSION_DENIED).
    #[error("principal {principal:?} may not {what}")]
    Forbidden {
        /// Who asked.
        principal: String,
        /// What for.
        what: String,
    },
}

/// The SHA-256 of a bearer token, as the auth file stores it.
pub type TokenHash = [u8; 32];

/// Who may do what on this node.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Rights by principal name. A principal not listed has none.
    principals: BTreeMap<String, Rights>,
    /// Rights of an authenticated client certificate whose principal is not listed (the
    /// default policy's "every client of the cluster").
    any_certificate: Option<Rights>,
    /// Bearer tokens by hash.
    tokens: HashMap<TokenHash, String>,
    /// Where the policy came from, for the start log.
    pub source: PolicySource,
}

/// Where a [`Policy`] came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// The auth file at this path.
    File(PathBuf),
    /// TLS on, no auth file: the admins, and every other client certificate of the cluster.
    DefaultWithTls,
}

/// An auth file that cannot be used. Each says what to change.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    /// Not readable or not valid TOML of the expected shape.
    #[error("auth file {path}: {why}")]
    Parse {
        /// File.
        path: PathBuf,
        /// Reason.
        why: String,
    },
    /// A rule that makes no sense.
    #[error("auth file {path}: {why}")]
    Invalid {
        /// File.
        path: PathBuf,
        /// Reason.
        why: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFile {
    #[serde(default)]
    principals: BTreeMap<String, Rights>,
    #[serde(default)]
    tokens: BTreeMap<String, TokenHashes>,
}

/// One token hash, or several (a principal keeps its old token while its clients move to
/// a new one).
#[derive(Deserialize)]
#[serde(untagged)]
enum TokenHashes {
    One(String),
    Several(Vec<String>),
}

impl TokenHashes {
    fn iter(&self) -> impl Iterator<Item = &String> {
        match self {
            TokenHashes::One(one) => std::slice::from_ref(one).iter(),
            TokenHashes::Several(several) => several.iter(),
        }
    }
}

/// Whether `name` can be a principal: what a client certificate's DNS label can carry
/// (1 to 63 lowercase letters, digits and inner hyphens).
pub fn principal_name_ok(name: &str) -> bool {
    tenure_transport::tls::cluster_id_is_dns_label(name)
}

/// `sha256:<hex>` of `token`: what the auth file stores for it.
pub fn token_hash_line(token: &str) -> String {
    let hash: TokenHash = sha2::Sha256::digest(token.as_bytes()).into();
    format!("sha256:{}", hex(&hash))
}

/// A new bearer token: `tenure_` and 64 hex digits (256 bits from the OS's random source,
/// drawn as two session secrets).
pub fn new_token() -> Result<String, String> {
    let mut bytes = tenure_proto::new_session_secret()?;
    bytes.extend(tenure_proto::new_session_secret()?);
    Ok(format!("tenure_{}", hex(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hash(text: &str) -> Option<TokenHash> {
    let hex = text.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Policy {
    /// The policy in the auth file at `path`.
    ///
    /// A file that others than its owner may write is refused: whoever can write it can make
    /// themselves an admin.
    pub fn load(path: &Path) -> Result<Policy, AuthFileError> {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path)
            .map_err(|e| AuthFileError::Parse {
                path: path.to_path_buf(),
                why: e.to_string(),
            })?
            .permissions()
            .mode();
        if mode & 0o022 != 0 {
            return Err(AuthFileError::Invalid {
                path: path.to_path_buf(),
                why: format!(
                    "its mode {:o} lets others than its owner change who may do what; \
                     chmod go-w it",
                    mode & 0o777
                ),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|e| AuthFileError::Parse {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        Policy::parse(&text, path)
    }

    /// The policy in `text`, an auth file read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Policy, AuthFileError> {
        let invalid = |why: String| AuthFileError::Invalid {
            path: path.to_path_buf(),
            why,
        };
        let file: AuthFile = toml::from_str(text).map_err(|e| AuthFileError::Parse {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        for (name, rights) in &file.principals {
            if !principal_name_ok(name) {
                return Err(invalid(format!(
                    "principal {name:?}: names are 1 to 63 lowercase letters, digits and inner hyphens (what a client certificate can carry)"
                )));
            }
            if rights.roles.is_empty() && rights.grants.is_empty() {
                return Err(invalid(format!(
                    "principal {name:?} has no roles and no grants"
                )));
            }
            if let Some(g) = rights.grants.iter().find(|g| g.allow.is_empty()) {
                return Err(invalid(format!(
                    "principal {name:?}: the grant on prefix {:?} allows nothing",
                    g.prefix
                )));
            }
        }
        let mut tokens = HashMap::new();
        for (name, hashes) in &file.tokens {
            if !file.principals.contains_key(name) {
                return Err(invalid(format!(
                    "token for {name:?}, which is not among [principals]"
                )));
            }
            for hash in hashes.iter() {
                let Some(hash) = parse_hash(hash) else {
                    return Err(invalid(format!(
                        "token for {name:?} is not \"sha256:<64 hex digits>\" (the line `tenure token {name}` prints)"
                    )));
                };
                if tokens.insert(hash, name.clone()).is_some() {
                    return Err(invalid(format!("a token for {name:?} is listed twice")));
                }
            }
        }
        Ok(Policy {
            principals: file.principals,
            any_certificate: None,
            tokens,
            source: PolicySource::File(path.to_path_buf()),
        })
    }

    /// TLS on and no auth file: `admins` are admins; every other client certificate of the
    /// cluster may campaign, observe, read and write under every name, and read metrics.
    pub fn default_with_tls(admins: &[String]) -> Policy {
        let admin = Rights {
            roles: BTreeSet::from([Role::Admin]),
            grants: Vec::new(),
            quotas: Quotas::default(),
        };
        Policy {
            principals: admins.iter().map(|a| (a.clone(), admin.clone())).collect(),
            any_certificate: Some(Rights {
                roles: BTreeSet::from([Role::Observer]),
                grants: vec![Grant {
                    prefix: String::new(),
                    allow: BTreeSet::from([
                        Permission::Campaign,
                        Permission::Observe,
                        Permission::Read,
                        Permission::Write,
                    ]),
                }],
                quotas: Quotas::default(),
            }),
            tokens: HashMap::new(),
            source: PolicySource::DefaultWithTls,
        }
    }

    /// Whether the policy knows any bearer token.
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The principal behind `token`.
    fn by_token(&self, token: &str) -> Option<&str> {
        let hash: TokenHash = sha2::Sha256::digest(token.as_bytes()).into();
        self.tokens.get(&hash).map(String::as_str)
    }

    /// Who a request's client is, from its `authorization` header value (if any) and the
    /// principal its client certificate names (if any), before anything says what it wants:
    /// what the client port asks at a request's headers ([`crate::api::admission`]). A bearer
    /// token, when present, is what counts.
    pub fn identify(
        &self,
        authorization: Option<&str>,
        certificate: Option<&str>,
    ) -> Result<Identity, Denied> {
        let (name, from_certificate) = self.authenticate(authorization, certificate, None)?;
        let rights = self.rights(&name, from_certificate);
        let operator = rights.is_some_and(|r| r.has(Role::Admin) || r.has(Role::Observer));
        Ok(Identity { name, operator })
    }

    /// The quotas set for principal `name` in the auth file (none for the default policy's
    /// unlisted certificates, nor without a policy).
    pub fn quotas(&self, name: &str) -> Quotas {
        self.principals
            .get(name)
            .map(|r| r.quotas)
            .unwrap_or_default()
    }

    fn rights(&self, name: &str, from_certificate: bool) -> Option<&Rights> {
        match self.principals.get(name) {
            Some(rights) => Some(rights),
            None if from_certificate => self.any_certificate.as_ref(),
            None => None,
        }
    }

    /// The principal's name, and whether a certificate (not a token) named it.
    fn authenticate(
        &self,
        authorization: Option<&str>,
        certificate: Option<&str>,
        action: Option<&Action<'_>>,
    ) -> Result<(String, bool), Denied> {
        Ok(match (authorization, certificate) {
            (Some(header), _) => {
                let token = header
                    .strip_prefix("Bearer ")
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        Denied::Unauthenticated(
                            "the authorization header is not \"Bearer <token>\"".into(),
                        )
                    })?;
                let name = self.by_token(token).ok_or_else(|| {
                    Denied::Unauthenticated("the bearer token is not known to this cluster".into())
                })?;
                (name.to_string(), false)
            }
            (None, Some(name)) => (name.to_string(), true),
            (None, None) => {
                return Err(Denied::Unauthenticated(format!(
                    "{} needs a client certificate or a bearer token",
                    action.map_or("this call".to_string(), |a| a.describe())
                )))
            }
        })
    }

    /// Authenticate a request from its `authorization` header value (if any) and the
    /// principal its client certificate names (if any), and authorize `action`. A bearer
    /// token, when present, is what counts.
    pub fn check(
        &self,
        authorization: Option<&str>,
        certificate: Option<&str>,
        action: &Action<'_>,
    ) -> Result<Principal, Denied> {
        let (name, from_certificate) =
            self.authenticate(authorization, certificate, Some(action))?;
        let rights = self.rights(&name, from_certificate);
        if rights.is_some_and(|r| r.allow(action)) {
            Ok(Principal::Named(name))
        } else {
            Err(Denied::Forbidden {
                principal: name,
                what: action.describe(),
            })
        }
    }
}

/// Who a client is, as far as admission cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The principal.
    pub name: String,
    /// An admin or an observer: may use the connection slots kept for operators.
    pub operator: bool,
}

/// Who the client behind `authorization` (the header's bytes, if it sent one) and `leaf`
/// (its client certificate, if any) is, under `policy`: [`Policy::identify`], counting a
/// refusal in `metrics`.
pub fn identify(
    policy: &Policy,
    cluster_id: &str,
    authorization: Option<&[u8]>,
    leaf: Option<&CertificateDer<'_>>,
    metrics: &Metrics,
) -> Result<Identity, Denied> {
    credentials(cluster_id, authorization, leaf)
        .and_then(|(authorization, certificate)| {
            policy.identify(authorization, certificate.as_deref())
        })
        .inspect_err(|denied| count(denied, metrics))
}

/// What a request presents: its `authorization` header as text, and the principal its
/// client certificate names (if it is one of this cluster's clients).
fn credentials<'a>(
    cluster_id: &str,
    authorization: Option<&'a [u8]>,
    leaf: Option<&CertificateDer<'_>>,
) -> Result<(Option<&'a str>, Option<String>), Denied> {
    let authorization = authorization
        .map(|bytes| {
            std::str::from_utf8(bytes)
                .map_err(|_| Denied::Unauthenticated("the authorization header is not text".into()))
        })
        .transpose()?;
    let certificate = leaf.and_then(|leaf| client_principal(leaf, cluster_id));
    Ok((authorization, certificate))
}

/// Counts a refusal in the metrics.
fn count(denied: &Denied, metrics: &Metrics) {
    let counter = match denied {
        Denied::Unauthenticated(_) => &metrics.unauthenticated,
        Denied::Forbidden { .. } => &metrics.permission_denied,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// What the gRPC and HTTP ports both ask: may the client behind `authorization` (the
/// header's bytes, if it sent one) and `leaf` (its client certificate, if any) do `action`?
/// Without a policy, yes. Every refusal is counted in `metrics`.
pub fn authorize(
    policy: Option<&Policy>,
    cluster_id: &str,
    authorization: Option<&[u8]>,
    leaf: Option<&CertificateDer<'_>>,
    action: &Action<'_>,
    metrics: &Metrics,
) -> Result<Principal, Denied> {
    let Some(policy) = policy else {
        return Ok(Principal::Anyone);
    };
    credentials(cluster_id, authorization, leaf)
        .and_then(|(authorization, certificate)| {
            policy.check(authorization, certificate.as_deref(), action)
        })
        .inspect_err(|denied| count(denied, metrics))
}

#[cfg(test)]
mod tests {
    /// A denial reads as a sentence: "principal "x" may not <verb> …" for every action.
    #[test]
    fn every_denial_names_what_was_asked_with_a_verb() {
        for action in [
            Action::Session,
            Action::Campaign("e"),
            Action::Observe("e"),
            Action::Read("k"),
            Action::Write {
                key: "k",
                election: "e",
            },
            Action::Status,
            Action::Members,
            Action::Metrics,
            Action::Admin,
        ] {
            let said = action.describe();
            let verb = said.split(' ').next().unwrap_or_default();
            assert!(
                ["hold", "campaign", "observe", "read", "write", "change"].contains(&verb),
                "\"may not {said}\" does not read"
            );
        }
    }

    use super::*;

    const FILE: &str = r#"
[principals.admin]
roles = ["admin"]

[principals.billing]
grants = [
  { prefix = "billing/", allow = ["campaign", "observe"] },
  { prefix = "billing/keys/", allow = ["read", "write"] },
]

[principals.grafana]
roles = ["observer"]

[tokens]
grafana = "sha256:REPLACE"
"#;

    fn policy() -> (Policy, String) {
        let token = new_token().expect("token");
        let text = FILE.replace("sha256:REPLACE", &token_hash_line(&token));
        let policy = Policy::parse(&text, Path::new("auth.toml")).expect("parses");
        (policy, token)
    }

    fn bearer(token: &str) -> String {
        format!("Bearer {token}")
    }

    #[test]
    fn grants_cover_their_prefix_and_nothing_else() {
        let (p, _) = policy();
        let billing = Some("billing");
        assert!(p
            .check(None, billing, &Action::Campaign("billing/close"))
            .is_ok());
        assert!(p
            .check(None, billing, &Action::Observe("billing/close"))
            .is_ok());
        assert!(p
            .check(
                None,
                billing,
                &Action::Write {
                    key: "billing/keys/x",
                    election: "billing/close"
                }
            )
            .is_ok());
        assert!(p.check(None, billing, &Action::Session).is_ok());
        assert!(p.check(None, billing, &Action::Status).is_ok());
        assert!(p.check(None, billing, &Action::Members).is_ok());
        for denied in [
            Action::Campaign("shipping/close"),
            Action::Campaign("billing"),
            Action::Write {
                key: "billing/close",
                election: "billing/close",
            },
            // A key it may write, fenced by an election it may not campaign in.
            Action::Write {
                key: "billing/keys/x",
                election: "shipping/close",
            },
            Action::Read("billing/close"),
            Action::Metrics,
            Action::Admin,
        ] {
            assert!(
                matches!(
                    p.check(None, billing, &denied),
                    Err(Denied::Forbidden { .. })
                ),
                "{denied:?}"
            );
        }
    }

    #[test]
    fn observers_read_everything_and_change_nothing() {
        let (p, token) = policy();
        let auth = bearer(&token);
        let auth = Some(auth.as_str());
        for allowed in [
            Action::Observe("any"),
            Action::Read("any/key"),
            Action::Status,
            Action::Members,
            Action::Metrics,
        ] {
            assert_eq!(
                p.check(auth, None, &allowed),
                Ok(Principal::Named("grafana".into())),
                "{allowed:?}"
            );
        }
        for denied in [
            Action::Session,
            Action::Campaign("any"),
            Action::Write {
                key: "any/key",
                election: "any/election",
            },
            Action::Admin,
        ] {
            assert!(p.check(auth, None, &denied).is_err(), "{denied:?}");
        }
    }

    #[test]
    fn unknown_tokens_and_missing_credentials_are_unauthenticated() {
        let (p, token) = policy();
        let wrong = bearer(&format!("{token}0"));
        for header in [Some(wrong.as_str()), Some("Basic abc"), Some("Bearer ")] {
            assert!(
                matches!(
                    p.check(header, Some("admin"), &Action::Status),
                    Err(Denied::Unauthenticated(_))
                ),
                "{header:?}: a bad token is not rescued by a certificate"
            );
        }
        for action in [Action::Status, Action::Members] {
            assert!(matches!(
                p.check(None, None, &action),
                Err(Denied::Unauthenticated(_))
            ));
        }
        // A certificate naming a principal the file does not list has no rights.
        assert!(matches!(
            p.check(None, Some("stranger"), &Action::Status),
            Err(Denied::Forbidden { .. })
        ));
    }

    #[test]
    fn the_default_policy_lets_cluster_clients_work_and_only_admins_administer() {
        let p = Policy::default_with_tls(&["ops".into()]);
        assert!(p.check(None, Some("app"), &Action::Campaign("x")).is_ok());
        assert!(p
            .check(
                None,
                Some("app"),
                &Action::Write {
                    key: "k",
                    election: "e"
                }
            )
            .is_ok());
        assert!(p.check(None, Some("app"), &Action::Metrics).is_ok());
        assert!(p.check(None, Some("app"), &Action::Admin).is_err());
        assert!(p.check(None, Some("ops"), &Action::Admin).is_ok());
        assert!(matches!(
            p.check(None, None, &Action::Campaign("x")),
            Err(Denied::Unauthenticated(_))
        ));
    }

    #[test]
    fn bad_auth_files_are_refused_with_what_to_change() {
        let cases = [
            ("[principals.Admin]\nroles = [\"admin\"]\n", "names are"),
            ("[principals.a]\n", "no roles and no grants"),
            ("[principals.a]\nroles = [\"root\"]\n", "unknown variant"),
            (
                "[principals.a]\ngrants = [{ prefix = \"\", allow = [] }]\n",
                "allows nothing",
            ),
            (
                "[principals.a]\ngrants = [{ prefix = \"\", allow = [\"delete\"] }]\n",
                "unknown variant",
            ),
            (
                "[principals.a]\nroles = [\"observer\"]\n[tokens]\nb = \"sha256:00\"\n",
                "not among [principals]",
            ),
            (
                "[principals.a]\nroles = [\"observer\"]\n[tokens]\na = \"plaintext-token\"\n",
                "sha256:<64 hex digits>",
            ),
            ("[principal.a]\nroles = [\"observer\"]\n", "unknown field"),
        ];
        for (text, why) in cases {
            let e = Policy::parse(text, Path::new("auth.toml"))
                .expect_err(text)
                .to_string();
            assert!(e.contains(why) && e.contains("auth.toml"), "{text}: {e}");
        }
    }

    #[test]
    fn a_principal_may_hold_several_tokens_while_they_rotate() {
        let (old, new) = (new_token().expect("token"), new_token().expect("token"));
        let text = format!(
            "[principals.ci]\nroles = [\"observer\"]\n[tokens]\nci = [{:?}, {:?}]\n",
            token_hash_line(&old),
            token_hash_line(&new)
        );
        let p = Policy::parse(&text, Path::new("auth.toml")).expect("parses");
        for token in [&old, &new] {
            assert_eq!(
                p.check(Some(&bearer(token)), None, &Action::Metrics),
                Ok(Principal::Named("ci".into()))
            );
        }
        let twice = format!(
            "[principals.ci]\nroles = [\"observer\"]\n[tokens]\nci = [{0:?}, {0:?}]\n",
            token_hash_line(&old)
        );
        let e = Policy::parse(&twice, Path::new("auth.toml")).expect_err("twice");
        assert!(e.to_string().contains("listed twice"), "{e}");
    }

    #[test]
    fn a_token_hash_line_round_trips_and_tokens_are_unique() {
        let a = new_token().expect("token");
        let b = new_token().expect("token");
        assert_ne!(a, b);
        assert!(a.starts_with("tenure_") && a.len() == 7 + 64, "{a}");
        let line = token_hash_line(&a);
        let hash = parse_hash(&line).expect("parses");
        assert_eq!(hash, <TokenHash>::from(sha2::Sha256::digest(a.as_bytes())));
        assert!(!line.contains(&a[7..]), "the line does not hold the token");
    }
}
