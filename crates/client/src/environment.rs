//! Where a tenure program finds its backend when nobody says: `$TENURE_BACKEND`, and for a
//! `tenure://` URL without a query of its own, its TLS files from `$TENURE_CA` (which turns
//! TLS on), `$TENURE_CERT` and `$TENURE_KEY` (a client certificate), and its bearer token
//! from `$TENURE_TOKEN_FILE`. What a caller was given explicitly (a flag, an argument) comes
//! before the environment.

/// The backend when neither the caller nor `$TENURE_BACKEND` names one: a local node's
/// client port.
pub const DEFAULT_BACKEND: &str = "tenure://127.0.0.1:8001";
/// The backend URL's variable.
pub const ENV_BACKEND: &str = "TENURE_BACKEND";
/// The cluster's CA certificate's variable.
pub const ENV_CA: &str = "TENURE_CA";
/// The client certificate's variable.
pub const ENV_CERT: &str = "TENURE_CERT";
/// The client certificate's key's variable.
pub const ENV_KEY: &str = "TENURE_KEY";
/// The bearer token file's variable.
pub const ENV_TOKEN_FILE: &str = "TENURE_TOKEN_FILE";

/// The TLS files and token a caller was given explicitly, each taking the place of its
/// environment variable.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// The cluster's CA certificate (`$TENURE_CA`).
    pub ca: Option<String>,
    /// A client certificate (`$TENURE_CERT`).
    pub cert: Option<String>,
    /// Its private key (`$TENURE_KEY`).
    pub key: Option<String>,
    /// A file holding a bearer token (`$TENURE_TOKEN_FILE`).
    pub token_file: Option<String>,
}

impl Credentials {
    /// Each file or token not given explicitly, from its environment variable (if set and
    /// not empty).
    pub fn or_environment(self) -> Credentials {
        let pick = |given: Option<String>, var: &str| given.or_else(|| env_nonempty(var));
        Credentials {
            ca: pick(self.ca, "TENURE_CA"),
            cert: pick(self.cert, "TENURE_CERT"),
            key: pick(self.key, "TENURE_KEY"),
            token_file: pick(self.token_file, "TENURE_TOKEN_FILE"),
        }
    }
}

/// `given`, else `$TENURE_BACKEND`, else [`DEFAULT_BACKEND`]; a `tenure://` URL without a
/// query gets its TLS files and token from `credentials`, else from the environment.
pub fn backend_url(given: Option<&str>, credentials: &Credentials) -> String {
    let url = given
        .map(str::to_string)
        .or_else(|| env_nonempty("TENURE_BACKEND"))
        .unwrap_or_else(|| DEFAULT_BACKEND.to_string());
    with_credentials(url, |var| {
        let given = match var {
            "TENURE_CA" => &credentials.ca,
            "TENURE_CERT" => &credentials.cert,
            "TENURE_KEY" => &credentials.key,
            "TENURE_TOKEN_FILE" => &credentials.token_file,
            _ => &None,
        };
        given.clone().or_else(|| env_nonempty(var))
    })
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

/// Appends `ca`, `cert`, `key` and `token_file` from `lookup` (by environment variable
/// name) to a `tenure://` URL that has no query.
fn with_credentials(mut url: String, lookup: impl Fn(&str) -> Option<String>) -> String {
    if !url.starts_with("tenure://") || url.contains('?') {
        return url;
    }
    let params: Vec<String> = [
        ("ca", "TENURE_CA"),
        ("cert", "TENURE_CERT"),
        ("key", "TENURE_KEY"),
        ("token_file", "TENURE_TOKEN_FILE"),
    ]
    .into_iter()
    .filter_map(|(param, var)| lookup(var).map(|v| format!("{param}={v}")))
    .collect();
    if !params.is_empty() {
        url.push('?');
        url.push_str(&params.join("&"));
    }
    url
}

#[cfg(test)]
mod tests {
    use super::with_credentials;

    #[test]
    fn tls_files_come_from_the_environment_unless_the_url_names_its_own() {
        let env = |v: &str| match v {
            "TENURE_CA" => Some("/c/ca.pem".to_string()),
            "TENURE_CERT" => Some("/c/client-app.pem".to_string()),
            "TENURE_KEY" => Some("/c/client-app-key.pem".to_string()),
            _ => None,
        };
        assert_eq!(
            with_credentials("tenure://h:1,h:2".into(), env),
            "tenure://h:1,h:2?ca=/c/ca.pem&cert=/c/client-app.pem&key=/c/client-app-key.pem"
        );
        assert_eq!(
            with_credentials("tenure://h:1".into(), |v| (v == "TENURE_TOKEN_FILE")
                .then(|| "/run/token".to_string())),
            "tenure://h:1?token_file=/run/token"
        );
        assert_eq!(
            with_credentials("tenure://h:1?ca=/x".into(), env),
            "tenure://h:1?ca=/x"
        );
        assert_eq!(with_credentials("etcd://h:1".into(), env), "etcd://h:1");
        assert_eq!(
            with_credentials("tenure://h:1".into(), |_| None),
            "tenure://h:1"
        );
    }
}
