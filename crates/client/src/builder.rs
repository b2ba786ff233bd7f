//! [`ClientBuilder`]: a client's TLS files, token and timeouts set in code, and
//! [`Client::from_env`], which takes the backend and credentials from the environment as the
//! `tenure` command does.

use std::path::PathBuf;
use std::time::Duration;

use crate::channel::Timeouts;
use crate::environment::{DEFAULT_BACKEND, ENV_BACKEND, ENV_CA, ENV_CERT, ENV_KEY, ENV_TOKEN_FILE};
use crate::url::{ClusterUrl, Password, Target};
use crate::{Client, Error, Result};

/// A [`Client`] with options set in code: TLS files, a bearer token, member discovery and
/// timeouts, for a `tenure://` URL (or an `embedded:` one, for the timeouts). Each option
/// may be given once, either here or in the URL's query: naming it in both is an
/// [`Error::InvalidArgument`], never a silent choice.
///
/// ```no_run
/// # async fn f() -> tenure::Result<()> {
/// use std::time::Duration;
///
/// let client = tenure::Client::builder("tenure://10.0.0.1:8001,10.0.0.2:8001")
///     .ca("/etc/tenure/ca.pem")
///     .identity("/etc/tenure/client-billing.pem", "/etc/tenure/client-billing-key.pem")
///     .request_timeout(Duration::from_secs(10))
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
///
/// [`ClientBuilder::env`] fills whatever is still unset from `$TENURE_CA`, `$TENURE_CERT`,
/// `$TENURE_KEY` and `$TENURE_TOKEN_FILE`; [`Client::from_env`] also takes the URL from
/// `$TENURE_BACKEND`.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until .connect() is called"]
pub struct ClientBuilder {
    url: String,
    ca: Option<PathBuf>,
    identity: Option<(PathBuf, PathBuf)>,
    token_file: Option<PathBuf>,
    token: Option<Password>,
    discover: Option<bool>,
    connect_timeout: Option<Duration>,
    attempt_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    from_env: bool,
}

impl Client {
    /// A builder for a client of `url` (see [`ClientBuilder`]).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            ca: None,
            identity: None,
            token_file: None,
            token: None,
            discover: None,
            connect_timeout: None,
            attempt_timeout: None,
            request_timeout: None,
            from_env: false,
        }
    }

    /// A client of the backend `$TENURE_BACKEND` names (else `tenure://127.0.0.1:8001`),
    /// with its TLS files and token from `$TENURE_CA`, `$TENURE_CERT`, `$TENURE_KEY` and
    /// `$TENURE_TOKEN_FILE` unless its URL has them: what the `tenure` command does.
    pub async fn from_env() -> Result<Client> {
        Client::builder(env_nonempty(ENV_BACKEND).unwrap_or_else(|| DEFAULT_BACKEND.to_string()))
            .env()
            .connect()
            .await
    }
}

impl ClientBuilder {
    /// The cluster's CA certificate (PEM): turns TLS on. The URL's `ca=`.
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(path.into());
        self
    }

    /// A client certificate and its private key (PEM), which name the principal. The URL's
    /// `cert=` and `key=`. Needs [`ClientBuilder::ca`].
    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// A file holding a bearer token (what `tenure token NAME` printed), read once at
    /// connect. The URL's `token_file=`.
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token_file = Some(path.into());
        self
    }

    /// A bearer token itself, say from a secret store. It is never printed: `Debug` shows
    /// `***`. Not with [`ClientBuilder::token_file`].
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Password::new(token.into()));
        self
    }

    /// Whether to learn the other members from the cluster (default true). The URL's
    /// `discover=`; false for a client behind a proxy that only the URL's addresses reach.
    pub fn discover(mut self, discover: bool) -> Self {
        self.discover = Some(discover);
        self
    }

    /// How long connecting to one node may take, TCP and TLS (default 500 ms).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long one attempt at one node may take before the next node is tried (default
    /// 2 s): this bounds a node that took a request but cannot answer it.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// How long one call keeps retrying across nodes before its error surfaces (default
    /// 5 s). A call that may have taken effect is then [`Error::Indeterminate`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Fill what neither this builder nor the URL sets from `$TENURE_CA`, `$TENURE_CERT`,
    /// `$TENURE_KEY` and `$TENURE_TOKEN_FILE` (each if set and not empty), as the `tenure`
    /// command does.
    pub fn env(mut self) -> Self {
        self.from_env = true;
        self
    }

    /// Connect (see [`Client::connect`]). Fails with [`Error::InvalidArgument`] for an
    /// option named twice, an option the URL's backend does not take here (etcd, PostgreSQL
    /// and ZooKeeper take TLS and credentials in their URLs), or a timeout that is zero,
    /// above an hour, or an attempt longer than the request; with [`Error::InvalidUrl`] for
    /// a bad URL or a file that cannot be read.
    pub async fn connect(self) -> Result<Client> {
        let target = Target::parse(&self.url)?;
        match target {
            Target::Cluster(url) => {
                let url = self.apply(url, &env_nonempty)?;
                Client::over_cluster(&self.url, &url)
            }
            Target::Embedded(_) => {
                if self.has_connection_options() {
                    return Err(self.refuse("an embedded: client reaches its own node; TLS, tokens and discovery are set on the node"));
                }
                Client::connect_with(&self.url, self.timeouts(Timeouts::default())?).await
            }
            _ => {
                if self.has_options() {
                    return Err(self.refuse(
                        "the builder's TLS, token, discovery and timeout options are for tenure:// URLs; \
                         etcd, PostgreSQL and ZooKeeper take TLS and credentials in their URLs \
                         (etcds://…?ca=…, postgres://…?sslmode=verify-full&sslrootcert=…, zk://user:pw@…)",
                    ));
                }
                Client::connect(&self.url).await
            }
        }
    }

    /// TLS, a token or discovery: what only a `tenure://` URL's connections take.
    fn has_connection_options(&self) -> bool {
        self.ca.is_some()
            || self.identity.is_some()
            || self.token_file.is_some()
            || self.token.is_some()
            || self.discover.is_some()
    }

    fn has_options(&self) -> bool {
        self.has_connection_options()
            || self.connect_timeout.is_some()
            || self.attempt_timeout.is_some()
            || self.request_timeout.is_some()
    }

    fn refuse(&self, why: &str) -> Error {
        Error::InvalidArgument(format!("{}: {why}", crate::redact_url(&self.url)))
    }

    /// The builder's timeouts over `base`, checked.
    fn timeouts(&self, base: Timeouts) -> Result<Timeouts> {
        let t = Timeouts {
            connect: self.connect_timeout.unwrap_or(base.connect),
            attempt: self.attempt_timeout.unwrap_or(base.attempt),
            request: self.request_timeout.unwrap_or(base.request),
        };
        t.check().map_err(Error::InvalidArgument)?;
        Ok(t)
    }

    /// `url` with this builder's options, then (with [`ClientBuilder::env`]) what `lookup`
    /// finds for what is still unset.
    pub(crate) fn apply(
        &self,
        mut url: ClusterUrl,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClusterUrl> {
        let twice = |what: &str| {
            self.refuse(&format!(
                "{what} is given both in the URL's query and to the builder; give it once"
            ))
        };
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        if let Some(ca) = &self.ca {
            if url.ca.is_some() {
                return Err(twice("the CA (ca=)"));
            }
            url.ca = Some(path(ca));
        }
        if let Some((cert, key)) = &self.identity {
            if url.identity.is_some() {
                return Err(twice("the client certificate (cert= and key=)"));
            }
            url.identity = Some((path(cert), path(key)));
        }
        if let Some(file) = &self.token_file {
            if url.token_file.is_some() {
                return Err(twice("the token file (token_file=)"));
            }
            url.token_file = Some(path(file));
        }
        if let Some(token) = &self.token {
            if url.token_file.is_some() {
                return Err(self.refuse("a token and a token file are both given; give one"));
            }
            url.token = Some(token.clone());
        }
        if let Some(discover) = self.discover {
            if self.url.contains("discover=") {
                return Err(twice("discovery (discover=)"));
            }
            url.discover = discover;
        }
        if self.from_env {
            if url.ca.is_none() {
                url.ca = lookup(ENV_CA);
            }
            if url.identity.is_none() {
                match (lookup(ENV_CERT), lookup(ENV_KEY)) {
                    (Some(cert), Some(key)) => url.identity = Some((cert, key)),
                    (None, None) => {}
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "${ENV_CERT} and ${ENV_KEY} go together: one is set, the other is not"
                        )))
                    }
                }
            }
            if url.token_file.is_none() && url.token.is_none() {
                url.token_file = lookup(ENV_TOKEN_FILE);
            }
        }
        if url.identity.is_some() && url.ca.is_none() {
            return Err(
                self.refuse("a client certificate needs the cluster's CA too (ca, or $TENURE_CA)")
            );
        }
        url.timeouts = self.timeouts(url.timeouts)?;
        Ok(url)
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(url: &str) -> ClusterUrl {
        match Target::parse(url).expect("parses") {
            Target::Cluster(c) => c,
            _ => panic!("not a cluster URL"),
        }
    }

    fn env(var: &str) -> Option<String> {
        match var {
            ENV_CA => Some("/env/ca.pem".into()),
            ENV_CERT => Some("/env/c.pem".into()),
            ENV_KEY => Some("/env/k.pem".into()),
            ENV_TOKEN_FILE => Some("/env/token".into()),
            _ => None,
        }
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn what_the_builder_says_goes_into_the_url_and_the_environment_fills_the_rest() {
        let b = Client::builder("tenure://h:1")
            .ca("/b/ca.pem")
            .request_timeout(Duration::from_secs(9))
            .env();
        let u = b.apply(cluster("tenure://h:1"), &env).expect("applies");
        assert_eq!(
            u.ca.as_deref(),
            Some("/b/ca.pem"),
            "the builder's CA wins over $TENURE_CA"
        );
        assert_eq!(
            u.identity,
            Some(("/env/c.pem".into(), "/env/k.pem".into())),
            "the certificate comes from the environment"
        );
        assert_eq!(u.token_file.as_deref(), Some("/env/token"));
        assert_eq!(u.timeouts.request, Duration::from_secs(9));
        assert_eq!(u.timeouts.attempt, Timeouts::default().attempt);

        // Without .env(), the environment is not read.
        let u = Client::builder("tenure://h:1")
            .apply(cluster("tenure://h:1"), &env)
            .expect("applies");
        assert_eq!((u.ca, u.identity, u.token_file), (None, None, None));

        // The URL's own query counts as given: the environment does not replace it.
        let u = Client::builder("tenure://h:1?ca=/u/ca.pem")
            .env()
            .apply(cluster("tenure://h:1?ca=/u/ca.pem"), &env)
            .expect("applies");
        assert_eq!(u.ca.as_deref(), Some("/u/ca.pem"));

        // A token given in code keeps $TENURE_TOKEN_FILE out, and never prints.
        let b = Client::builder("tenure://h:1").token("s3cret").env();
        let u = b.apply(cluster("tenure://h:1"), &env).expect("applies");
        assert_eq!(u.token_file, None);
        assert!(!format!("{b:?} {u:?}").contains("s3cret"));
    }

    #[test]
    fn an_option_given_twice_or_out_of_bounds_is_refused() {
        let refused = |b: ClientBuilder, url: &str, says: &str| {
            let e = b.apply(cluster(url), &none).expect_err("refused");
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
            assert!(e.to_string().contains(says), "{e} should say {says:?}");
        };
        let url = "tenure://h:1?ca=/u/ca.pem";
        refused(Client::builder(url).ca("/b/ca.pem"), url, "give it once");
        let url = "tenure://h:1?discover=false";
        refused(Client::builder(url).discover(true), url, "give it once");
        let url = "tenure://h:1?token_file=/t";
        refused(Client::builder(url).token("x"), url, "give one");
        let url = "tenure://h:1";
        refused(
            Client::builder(url).identity("/c", "/k"),
            url,
            "needs the cluster's CA",
        );
        refused(
            Client::builder(url).request_timeout(Duration::ZERO),
            url,
            "above zero",
        );
        refused(
            Client::builder(url).attempt_timeout(Duration::from_secs(30)),
            url,
            "longer than the request timeout",
        );
        let half = |var: &str| (var == ENV_CERT).then(|| "/env/c.pem".to_string());
        let e = Client::builder(url)
            .ca("/b/ca.pem")
            .env()
            .apply(cluster(url), &half)
            .expect_err("a certificate without its key");
        assert!(e.to_string().contains("go together"), "{e}");
    }
}
