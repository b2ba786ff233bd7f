//! `host:port` addresses whose host may be a name (`node-2.internal:7002`, `localhost:7001`)
//! as well as an IP literal (`10.0.0.2:7002`, `[::1]:7002`).
//!
//! A name is kept as written and resolved each time the address is used (every dial, every
//! reconnect, every bind), never once at start: a peer that comes back under the same name
//! with a new IP address is reached at its new address.

use std::net::{IpAddr, SocketAddr};

/// Longest host name accepted (RFC 1035: 253 characters in text form).
pub const HOST_NAME_BYTES_MAX: usize = 253;
/// Longest label of a host name (RFC 1035).
const LABEL_BYTES_MAX: usize = 63;

/// A `host:port` address. The host is an IP address or a DNS name (letters, digits, `-` and
/// `_` in dot-separated labels, compared without regard to case); see the module docs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPort {
    /// The IP literal or the lowercased name, as written (IPv6 without brackets).
    host: String,
    /// The IP address, when the host is one (no resolution needed).
    ip: Option<IpAddr>,
    port: u16,
}

/// Why a string is not a `host:port` address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad address {addr:?}: {why} (expected HOST:PORT, e.g. 10.0.0.1:7001, node-1.example:7001 or [::1]:7001)")]
pub struct AddrError {
    /// The text given.
    pub addr: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl HostPort {
    /// The host: an IP address in text form, or a lowercased name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The IP address, when the host is one rather than a name.
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip
    }

    /// Whether the address is on this machine only: a loopback IP, or the name `localhost`
    /// (or a name under `.localhost`), which RFC 6761 reserves for loopback. Any other name
    /// counts as reachable from elsewhere, since what it resolves to can change.
    pub fn is_loopback(&self) -> bool {
        match self.ip {
            Some(ip) => ip.is_loopback(),
            None => self.host == "localhost" || self.host.ends_with(".localhost"),
        }
    }

    /// The socket addresses the host stands for now, in the resolver's order: the IP itself,
    /// or what the system resolver says about the name at this moment.
    pub async fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        if let Some(ip) = self.ip {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let found: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot resolve {self}: {e}")))?
            .collect();
        if found.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{self} resolves to no address"),
            ));
        }
        Ok(found)
    }
}

impl From<SocketAddr> for HostPort {
    fn from(a: SocketAddr) -> HostPort {
        HostPort {
            host: a.ip().to_string(),
            ip: Some(a.ip()),
            port: a.port(),
        }
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            Some(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            _ => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

impl std::str::FromStr for HostPort {
    type Err = AddrError;

    fn from_str(s: &str) -> Result<HostPort, AddrError> {
        let bad = |why| AddrError {
            addr: s.to_string(),
            why,
        };
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(a.into());
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no :PORT"))?;
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the port is not a number"));
        }
        let port: u16 = port.parse().map_err(|_| bad("the port is above 65535"))?;
        if host.starts_with('[') || host.contains(':') {
            // A socket address would have parsed above.
            return Err(bad(
                "an IPv6 address must be written in brackets, [ADDR]:PORT",
            ));
        }
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(HostPort {
                host: ip.to_string(),
                ip: Some(ip),
                port,
            });
        }
        if host.len() > HOST_NAME_BYTES_MAX {
            return Err(bad("the host name is longer than 253 characters"));
        }
        let host = host.strip_suffix('.').unwrap_or(host);
        for label in host.split('.') {
            if label.is_empty() {
                return Err(bad("the host name has an empty label"));
            }
            if label.len() > LABEL_BYTES_MAX {
                return Err(bad("a label of the host name is longer than 63 characters"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(bad(
                    "the host name may hold only letters, digits, '-', '_' and '.'",
                ));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(bad("a label of the host name starts or ends with '-'"));
            }
        }
        if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            // `1.2.3` or `300.1.1.1`: a mistyped IP address, not a name.
            return Err(bad("the host is neither an IP address nor a name"));
        }
        Ok(HostPort {
            host: host.to_ascii_lowercase(),
            ip: None,
            port,
        })
    }
}

impl TryFrom<String> for HostPort {
    type Error = AddrError;

    fn try_from(s: String) -> Result<HostPort, AddrError> {
        s.parse()
    }
}

impl From<HostPort> for String {
    fn from(a: HostPort) -> String {
        a.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_and_names_parse_and_print_as_written() {
        for (text, shown, ip) in [
            ("127.0.0.1:7001", "127.0.0.1:7001", true),
            ("[::1]:7001", "[::1]:7001", true),
            ("localhost:7001", "localhost:7001", false),
            ("Node-2.Example.COM:8002", "node-2.example.com:8002", false),
            ("node_2.internal.:1", "node_2.internal:1", false),
        ] {
            let a: HostPort = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(a.to_string(), shown, "{text}");
            assert_eq!(a.ip().is_some(), ip, "{text}");
            let again: HostPort = a.to_string().parse().expect("what it prints parses");
            assert_eq!(again, a);
        }
    }

    #[test]
    fn malformed_addresses_say_what_is_wrong() {
        for (text, why) in [
            ("localhost", "no :PORT"),
            ("localhost:", "not a number"),
            ("localhost:70000", "above 65535"),
            (":7001", "host is empty"),
            ("::1:7001", "brackets"),
            ("a..b:1", "empty label"),
            ("a b:1", "only letters"),
            ("-a:1", "starts or ends with '-'"),
            ("300.1.1.1:1", "neither an IP address nor a name"),
        ] {
            let e = text.parse::<HostPort>().expect_err(text);
            assert!(e.to_string().contains(why), "{text}: {e}");
            assert!(e.to_string().contains(&format!("{text:?}")), "{text}: {e}");
        }
    }

    #[test]
    fn only_loopback_ips_and_the_localhost_names_are_loopback() {
        for (text, loopback) in [
            ("127.0.0.1:1", true),
            ("[::1]:1", true),
            ("localhost:1", true),
            ("node.localhost:1", true),
            ("0.0.0.0:1", false),
            ("10.0.0.1:1", false),
            ("example.com:1", false),
            ("localhost.example.com:1", false),
        ] {
            let a: HostPort = text.parse().expect(text);
            assert_eq!(a.is_loopback(), loopback, "{text}");
        }
    }

    #[tokio::test]
    async fn names_resolve_when_asked_and_ips_need_no_resolver() {
        let ip: HostPort = "127.0.0.1:7001".parse().expect("valid");
        assert_eq!(
            ip.resolve().await.expect("an IP"),
            vec![SocketAddr::from(([127, 0, 0, 1], 7001))]
        );
        let name: HostPort = "localhost:7001".parse().expect("valid");
        let found = name.resolve().await.expect("localhost resolves");
        assert!(
            found
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 7001),
            "{found:?}"
        );
        let nowhere: HostPort = "no-such-host.invalid:1".parse().expect("valid");
        let e = nowhere
            .resolve()
            .await
            .expect_err(".invalid never resolves");
        assert!(e.to_string().contains("no-such-host.invalid:1"), "{e}");
    }
}
