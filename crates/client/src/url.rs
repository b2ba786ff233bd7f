//! Backend URLs, parsed once into a typed [`Target`].
//!
//! `tenure://`, `etcd://`, `etcds://` and `zk://` share one shape:
//! `SCHEME://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT…][/PATH][?NAME=VALUE&…]`.
//! User, password and query values are percent-decoded (a password holding `@`, `:`, `/`,
//! `?`, `#`, `%` or `&` must be written percent-encoded, as in any URL). The password is kept
//! in a [`Password`], whose `Debug` never shows it. `postgres://` URLs are PostgreSQL's own
//! and parsed by its driver; `memory:NAME` names an in-process world, `embedded:CLUSTER[/ID]`
//! a node running in this process.

use crate::{Error, Result};

/// What a backend URL names, parsed: which backend, and everything it needs to connect.
#[derive(Debug)]
// A backend left out of the build still has its URLs parsed (and refused with a reason).
#[cfg_attr(
    not(all(feature = "etcd", feature = "postgres", feature = "zookeeper")),
    allow(dead_code)
)]
pub(crate) enum Target {
    /// `memory:` or `memory:NAME`: the in-process world of that name.
    Memory(String),
    /// `tenure://`: a tenure cluster.
    Cluster(ClusterUrl),
    /// `etcd://` or `etcds://` (`tls`).
    Etcd {
        /// `etcds://`: TLS.
        tls: bool,
        /// The rest of the URL.
        url: HostsUrl,
    },
    /// `postgres://` or `postgresql://`: the whole URL, as PostgreSQL's driver reads it.
    Postgres(String),
    /// `zk://` or `zookeeper://`.
    Zk(HostsUrl),
    /// `embedded:CLUSTER[/ID]`: a node running in this process ([`crate::embedded`]).
    Embedded(String),
}

/// The schemes [`Target::parse`] knows, for the error that names an unknown one.
const UNKNOWN_SCHEME: &str =
    "unknown scheme; use tenure://, etcd://, etcds://, postgres://, zk://, memory: or embedded:";

/// A parsed `tenure://HOST:PORT[,HOST:PORT…][?ca=F[&cert=F&key=F]][&token_file=F][&discover=B]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClusterUrl {
    /// Each node's client address, as it will be dialed (checked by [`node_addr`]).
    pub addrs: Vec<String>,
    /// `ca=FILE`: TLS, with this CA certificate.
    pub ca: Option<String>,
    /// `cert=FILE&key=FILE`: a client certificate and its key.
    pub identity: Option<(String, String)>,
    /// `token_file=FILE`: a bearer token presented with every request.
    pub token_file: Option<String>,
    /// `discover=true` (the default): learn the other members from the cluster.
    pub discover: bool,
    /// A bearer token given in code ([`crate::ClientBuilder::token`]); never in a URL.
    pub token: Option<Password>,
    /// How long to wait for a connection, an attempt and a whole request
    /// ([`crate::ClientBuilder`]); the defaults otherwise.
    pub timeouts: crate::Timeouts,
}

impl Target {
    /// Parse `url`; the error is [`Error::InvalidUrl`] (the URL redacted) or, for a scheme
    /// no backend has, [`Error::UnsupportedBackend`].
    pub(crate) fn parse(url: &str) -> Result<Target> {
        let bad = |why: String| Error::InvalidUrl {
            url: crate::redact_url(url),
            why,
        };
        let (scheme, rest) = url
            .split_once(':')
            .ok_or_else(|| bad("expected SCHEME:...".into()))?;
        let authority = || {
            rest.strip_prefix("//")
                .ok_or_else(|| bad(format!("expected {scheme}://host:port,host:port")))
        };
        Ok(match scheme {
            "memory" => Target::Memory(rest.trim_start_matches("//").to_string()),
            "embedded" => {
                let name = rest.trim_start_matches("//");
                if name.is_empty() {
                    return Err(bad(
                        "expected embedded:CLUSTER or embedded:CLUSTER/ID".into()
                    ));
                }
                Target::Embedded(name.to_string())
            }
            "tenure" => Target::Cluster(ClusterUrl::parse(authority()?).map_err(bad)?),
            "etcd" | "etcds" => Target::Etcd {
                tls: scheme == "etcds",
                url: HostsUrl::parse(authority()?).map_err(|why| bad(format!("etcd: {why}")))?,
            },
            "postgres" | "postgresql" => Target::Postgres(url.to_string()),
            "zk" | "zookeeper" => Target::Zk(
                HostsUrl::parse(authority()?).map_err(|why| bad(format!("zookeeper: {why}")))?,
            ),
            other => {
                return Err(Error::UnsupportedBackend {
                    scheme: other.to_string(),
                    why: UNKNOWN_SCHEME.into(),
                })
            }
        })
    }
}

impl ClusterUrl {
    /// Parse `rest`, the URL after `tenure://`.
    pub(crate) fn parse(rest: &str) -> std::result::Result<ClusterUrl, String> {
        let mut u = HostsUrl::parse(rest)?;
        if u.user.is_some() {
            return Err(
                "tenure:// URLs carry no user or password (a client certificate or \
                 token_file identifies the client)"
                    .into(),
            );
        }
        if !u.path.is_empty() {
            return Err("tenure:// URLs have no path after the hosts".into());
        }
        let addrs = u
            .hosts
            .iter()
            .map(|h| node_addr(h))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let discover = match u.take("discover").as_deref() {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                return Err(format!(
                    "query parameter \"discover\" is {other:?}; it is true or false"
                ))
            }
        };
        let (ca, cert, key, token_file) = (
            u.take("ca"),
            u.take("cert"),
            u.take("key"),
            u.take("token_file"),
        );
        u.refuse_the_rest(&["ca", "cert", "key", "token_file", "discover"])?;
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err("cert and key go together".into()),
        };
        if ca.is_none() && identity.is_some() {
            return Err("cert and key need ca (the cluster's CA certificate) too".into());
        }
        Ok(ClusterUrl {
            addrs,
            ca,
            identity,
            token_file,
            discover,
            token: None,
            timeouts: crate::Timeouts::default(),
        })
    }
}

/// A password from a URL. `Debug` prints `***`, so that no derived `Debug` of a struct that
/// holds one, and no `{:?}` in an error, can show it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Password(String);

impl Password {
    /// A secret given in code rather than in a URL.
    pub(crate) fn new(secret: String) -> Password {
        Password(secret)
    }

    /// The password itself, for the one call that hands it to the backend.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// A parsed backend URL (everything after `SCHEME://`).
#[derive(Debug)]
#[cfg_attr(
    not(all(feature = "etcd", feature = "postgres", feature = "zookeeper")),
    allow(dead_code)
)]
pub(crate) struct HostsUrl {
    /// `host:port` of each server, in the order given.
    pub hosts: Vec<String>,
    /// The user name of `USER[:PASSWORD]@`, decoded.
    pub user: Option<String>,
    /// The password of `USER:PASSWORD@`, decoded.
    pub password: Option<Password>,
    /// The path after the hosts (`""` when there is none, else starting with `/`); a trailing
    /// `/` alone counts as none.
    pub path: String,
    /// The query's parameters that no backend has taken yet (see [`HostsUrl::take`]).
    params: Vec<(String, String)>,
}

impl HostsUrl {
    /// Parse `rest`, the URL after `SCHEME://`. The error says what is wrong, without
    /// quoting the URL (the caller names it, redacted).
    pub(crate) fn parse(rest: &str) -> std::result::Result<HostsUrl, String> {
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, password) = match info.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (info, None),
                };
                let user = decode(user).map_err(|e| format!("the user name {e}"))?;
                if user.is_empty() {
                    return Err("the user name before '@' is empty".into());
                }
                let password = match password {
                    Some(p) => {
                        let p = decode(p).map_err(|e| format!("the password {e}"))?;
                        if p.is_empty() {
                            return Err(format!("the password of user {user:?} is empty"));
                        }
                        Some(Password(p))
                    }
                    None => None,
                };
                (Some(user), password)
            }
        };
        let hosts: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect();
        if hosts.is_empty() {
            return Err("no host:port given".into());
        }
        let mut params: Vec<(String, String)> = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("query parameter {pair:?} has no value"))?;
            let name = decode(name).map_err(|e| format!("a query parameter's name {e}"))?;
            let value = decode(value).map_err(|e| format!("query parameter {name:?} {e}"))?;
            if value.is_empty() {
                return Err(format!("query parameter {name:?} is empty"));
            }
            if params.iter().any(|(n, _)| *n == name) {
                return Err(format!("query parameter {name:?} is given twice"));
            }
            params.push((name, value));
        }
        Ok(HostsUrl {
            hosts,
            user,
            password,
            path: if path == "/" {
                String::new()
            } else {
                path.to_string()
            },
            params,
        })
    }

    /// Take the value of query parameter `name`, if given.
    pub(crate) fn take(&mut self, name: &str) -> Option<String> {
        let i = self.params.iter().position(|(n, _)| n == name)?;
        Some(self.params.remove(i).1)
    }

    /// Fail if the query holds a parameter that was not taken: an unknown parameter is a
    /// mistake (a misspelt `ca` would otherwise silently turn TLS off), not something to skip.
    pub(crate) fn refuse_the_rest(&self, known: &[&str]) -> std::result::Result<(), String> {
        match self.params.first() {
            None => Ok(()),
            Some((name, _)) if known.is_empty() => Err(format!(
                "unknown query parameter {name:?} (this URL takes none)"
            )),
            Some((name, _)) => Err(format!(
                "unknown query parameter {name:?} (known: {})",
                known.join(", ")
            )),
        }
    }
}

/// Check one node address of a `tenure://` URL (or one a server named in a `not-leader`
/// hint or its member list): `HOST:PORT`, the host an IP address (`[…]` around IPv6) or a
/// DNS name. A name is not resolved here: the connection resolves it each time it connects,
/// so a node that comes back at a new IP address under its name is found there. Returns the
/// address as it will be dialed (a name lowercased), or what is wrong with it.
pub(crate) fn node_addr(addr: &str) -> std::result::Result<String, String> {
    if let Ok(a) = addr.parse::<std::net::SocketAddr>() {
        if a.port() == 0 {
            return Err(format!("{addr:?} has port 0"));
        }
        return Ok(addr.to_string());
    }
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{addr:?} is not HOST:PORT (no port)"))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => {}
        _ => return Err(format!("{addr:?} has no valid port (1 to 65535)")),
    }
    if host.contains(':') || host.starts_with('[') {
        return Err(format!(
            "{addr:?} is not HOST:PORT (an IPv6 address goes in brackets: [ADDR]:PORT)"
        ));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "{addr:?}: the host must be an IP address or a name of letters, digits, '-', '_' \
             and '.'"
        ));
    }
    if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("{addr:?}: {host:?} is not a valid IP address"));
    }
    Ok(format!("{}:{port}", name.to_ascii_lowercase()))
}

/// Percent-decode `s`; the result must be UTF-8.
pub(crate) fn decode(s: &str) -> std::result::Result<String, &'static str> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("has a '%' not followed by two hex digits")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "is not UTF-8 once percent-decoded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_users_hosts_paths_and_queries() {
        let u = HostsUrl::parse("app:p%40ss%3Aw%2Frd@h1:2379,h2:2379/chroot?ca=%2Ftmp%2Fca.pem")
            .expect("parses");
        assert_eq!(u.user.as_deref(), Some("app"));
        assert_eq!(u.password.as_ref().map(Password::expose), Some("p@ss:w/rd"));
        assert_eq!(u.hosts, ["h1:2379", "h2:2379"]);
        assert_eq!(u.path, "/chroot");
        let mut u = u;
        assert_eq!(u.take("ca").as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(u.refuse_the_rest(&["ca"]), Ok(()));

        let u = HostsUrl::parse("127.0.0.1:2181/").expect("parses");
        assert_eq!((u.user, u.password, u.path), (None, None, String::new()));
        let u = HostsUrl::parse("who@h:1").expect("parses");
        assert_eq!((u.user.as_deref(), u.password), (Some("who"), None));
    }

    #[test]
    fn bad_urls_are_refused_with_a_reason_that_does_not_quote_the_password() {
        for (rest, why) in [
            ("", "no host:port"),
            ("u:pw@", "no host:port"),
            (":pw@h:1", "user name before '@' is empty"),
            ("u:@h:1", "password of user \"u\" is empty"),
            ("u:p%zzw@h:1", "password has a '%'"),
            ("u:p%ffw@h:1", "password is not UTF-8"),
            ("h:1?ca", "has no value"),
            ("h:1?ca=", "is empty"),
            ("h:1?ca=a&ca=b", "given twice"),
        ] {
            let err = HostsUrl::parse(rest).expect_err(rest);
            assert!(err.contains(why), "{rest}: {err}");
            assert!(!err.contains("pw") && !err.contains("p%"), "{rest}: {err}");
        }
        let mut u = HostsUrl::parse("h:1?ca=x&bogus=1").expect("parses");
        u.take("ca");
        let err = u
            .refuse_the_rest(&["ca", "cert", "key"])
            .expect_err("bogus");
        assert_eq!(
            err,
            "unknown query parameter \"bogus\" (known: ca, cert, key)"
        );
        let u = HostsUrl::parse("h:1?x=1").expect("parses");
        assert!(u
            .refuse_the_rest(&[])
            .expect_err("x")
            .contains("takes none"));
    }

    #[test]
    fn node_addresses_may_be_names_or_ips_and_must_have_a_port() {
        for (addr, dialed) in [
            ("127.0.0.1:8001", "127.0.0.1:8001"),
            ("[::1]:8001", "[::1]:8001"),
            ("localhost:8001", "localhost:8001"),
            ("Node-2.Example.com.:8002", "node-2.example.com:8002"),
        ] {
            assert_eq!(node_addr(addr).as_deref(), Ok(dialed), "{addr}");
        }
        for (addr, why) in [
            ("localhost", "no port"),
            ("localhost:0", "no valid port"),
            ("localhost:+80", "no valid port"),
            ("localhost:99999", "no valid port"),
            ("::1:8001", "brackets"),
            (":8001", "the host must be"),
            ("a..b:1", "the host must be"),
            ("a b:1", "the host must be"),
            ("300.1.1.1:1", "not a valid IP address"),
        ] {
            let e = node_addr(addr).expect_err(addr);
            assert!(e.contains(why), "{addr}: {e}");
        }
    }

    #[test]
    fn cluster_urls_parse_once_into_addresses_tls_and_discovery() {
        let u = ClusterUrl::parse(
            "Node-1:8001,127.0.0.1:8002?ca=%2Fca.pem&cert=c&key=k&discover=false",
        )
        .expect("parses");
        assert_eq!(u.addrs, ["node-1:8001", "127.0.0.1:8002"]);
        assert_eq!(u.ca.as_deref(), Some("/ca.pem"));
        assert_eq!(u.identity, Some(("c".into(), "k".into())));
        assert!(!u.discover && u.token_file.is_none());
        for (rest, why) in [
            ("", "no host:port"),
            ("h", "no port"),
            ("h:1?cert=a&key=b", "need ca"),
            ("h:1?ca=a&cert=b", "go together"),
            ("h:1?discover=no", "true or false"),
            ("h:1?bogus=1", "unknown query parameter \"bogus\""),
            ("u:pw@h:1", "no user or password"),
            ("h:1/path", "no path"),
        ] {
            let e = ClusterUrl::parse(rest).expect_err(rest);
            assert!(e.contains(why), "{rest}: {e}");
        }
    }

    #[test]
    fn debug_never_shows_the_password() {
        let u = HostsUrl::parse("app:hunter2@h:1").expect("parses");
        let shown = format!("{u:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }
}
