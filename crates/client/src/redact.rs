//! Masking credentials in backend URLs before they reach a log line or an error message.

/// Query parameters whose values are secrets (PostgreSQL's, and generic ones).
const SECRET_PARAMS: &[&str] = &["password", "sslpassword", "token", "secret", "passfile"];

/// `url` with every credential replaced by `***`: the password of `user:password@`
/// (in each comma-separated host of a multi-host URL) and the values of query parameters such
/// as `password=` or `token=`. Everything else is kept, so the result still says which
/// backend and which hosts were meant (and which CA, certificate and key files: paths, not
/// secrets). A URL that is not `scheme://…` and holds a `:` or `@` after its scheme is
/// masked whole after the scheme.
///
/// A password should be percent-encoded, but one that is not may hold `/` or `?`, which
/// would end the host part early; so when an `@` follows the host part and the host part
/// has none, everything from the first `:` up to the last `@` is taken for a password. That
/// may mask more than needed (a query value holding `@`), never less.
///
/// ```
/// assert_eq!(
///     tenure::redact_url("postgres://app:hunter2@db:5432/prod?sslmode=require&password=x"),
///     "postgres://app:***@db:5432/prod?sslmode=require&password=***"
/// );
/// assert_eq!(
///     tenure::redact_url("etcds://app:hunter2@10.0.0.1:2379?ca=/etc/ca.pem"),
///     "etcds://app:***@10.0.0.1:2379?ca=/etc/ca.pem"
/// );
/// assert_eq!(tenure::redact_url("etcd://127.0.0.1:2379"), "etcd://127.0.0.1:2379");
/// ```
pub fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let host_part_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if !rest[..host_part_end].contains('@') {
            if let Some(at) = rest.rfind('@') {
                if let Some((user, _password)) = rest[..at].split_once(':') {
                    return redact_parsed(&format!("{scheme}://{user}:***@{}", &rest[at + 1..]));
                }
            }
        }
    }
    redact_parsed(url)
}

/// [`redact_url`] of a URL whose host part, if it has credentials, ends at its first `/` or
/// `?`.
fn redact_parsed(url: &str) -> String {
    let (before_query, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match before_query.split_once("://") {
        Some((scheme, rest)) => {
            // The authority ends at the first '/' after the scheme; userinfo ends at its
            // last '@'.
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let authority = match authority.rfind('@') {
                Some(at) => {
                    let (userinfo, hosts) = authority.split_at(at);
                    let userinfo = match userinfo.split_once(':') {
                        Some((user, _password)) => format!("{user}:***"),
                        None => userinfo.to_string(),
                    };
                    format!("{userinfo}{hosts}")
                }
                None => authority.to_string(),
            };
            format!("{scheme}://{authority}{path}")
        }
        // Not `scheme://…`: it cannot be parsed, so anything that may hold a credential
        // (`user:password`, `…@…`) after the scheme is masked whole.
        None => match before_query.split_once(':') {
            Some((scheme, rest)) if rest.contains(':') || rest.contains('@') => {
                format!("{scheme}:***")
            }
            _ => before_query.to_string(),
        },
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if SECRET_PARAMS.contains(&k.to_ascii_lowercase().as_str()) => {
                    format!("{k}=***")
                }
                _ => p.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_and_secret_parameters_are_masked_and_the_rest_is_kept() {
        let cases = [
            ("memory:", "memory:"),
            (
                "tenure://127.0.0.1:7001,127.0.0.1:7002",
                "tenure://127.0.0.1:7001,127.0.0.1:7002",
            ),
            ("postgres://app@db/prod", "postgres://app@db/prod"),
            (
                "postgres://app:s3cr%40t@db:5432/prod",
                "postgres://app:***@db:5432/prod",
            ),
            ("postgres://app:p@ss@db/prod", "postgres://app:***@db/prod"),
            (
                "zk://alice:pw@h1:2181,h2:2181/chroot",
                "zk://alice:***@h1:2181,h2:2181/chroot",
            ),
            (
                "postgres://db/x?user=a&Password=b&sslmode=require",
                "postgres://db/x?user=a&Password=***&sslmode=require",
            ),
            ("tenure://h:1?token=abc", "tenure://h:1?token=***"),
            ("memory:jobs", "memory:jobs"),
            ("etcd:app:pw@h", "etcd:***"),
            // The URL forms of etcd over TLS, PostgreSQL's sslmode and ZooKeeper's digest.
            (
                "etcds://tenure:s3cret@127.0.0.1:2379,127.0.0.2:2379?ca=/t/ca.pem&cert=/t/c.pem&key=/t/k.pem",
                "etcds://tenure:***@127.0.0.1:2379,127.0.0.2:2379?ca=/t/ca.pem&cert=/t/c.pem&key=/t/k.pem",
            ),
            ("etcd://tenure:s3cret@h:2379", "etcd://tenure:***@h:2379"),
            (
                "postgres://tenure:s3cret@127.0.0.1:5432/tenure?sslmode=verify-full&sslrootcert=/t/ca.pem",
                "postgres://tenure:***@127.0.0.1:5432/tenure?sslmode=verify-full&sslrootcert=/t/ca.pem",
            ),
            (
                "zk://tenure:s3cret@h1:2181,h2:2181/app",
                "zk://tenure:***@h1:2181,h2:2181/app",
            ),
            ("zk://tenure:p%40ss@h:2181", "zk://tenure:***@h:2181"),
            // Passwords that were not percent-encoded and hold '/', '?' or '@'.
            ("etcd://u:pa/ss@h:1", "etcd://u:***@h:1"),
            ("etcds://u:pa?ss@h:1?ca=/c", "etcds://u:***@h:1?ca=/c"),
            ("zk://u:a/b?c@d@h:1/app", "zk://u:***@h:1/app"),
            (
                "postgres://u:x/y@h/db?password=z",
                "postgres://u:***@h/db?password=***",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "{url}");
            for secret in [
                "s3cr", "p@ss", "p%40ss", ":pw@", "=b&", "abc", "pa/ss", "pa?ss", "a/b?c", "x/y",
                "=z",
            ] {
                if url.contains(secret) {
                    assert!(!redact_url(url).contains(secret), "{url}");
                }
            }
        }
    }
}
