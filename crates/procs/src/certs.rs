//! A harness's cluster certificates, issued as `tenure certs` issues them, and the client
//! TLS built from them: for gRPC, for the nodes' HTTP ports, and for a `tenure://` URL.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tenure_transport::certs::{files, issue, CertsRequest};
use tenure_transport::http::HttpClient;
use tenure_transport::TlsFiles;

/// The directory of a cluster's CA, node and client certificates.
#[derive(Clone, Debug)]
pub struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// Issue into `dir` (which must hold none yet) a CA, certificates for `nodes` of cluster
    /// `cluster_id` and for the client principals `clients`, valid for a day.
    pub fn issue(
        dir: &Path,
        cluster_id: &str,
        nodes: impl IntoIterator<Item = u64>,
        clients: &[&str],
    ) -> anyhow::Result<Certs> {
        let request = CertsRequest {
            cluster_id: cluster_id.to_string(),
            nodes: nodes.into_iter().collect(),
            clients: clients.iter().map(|c| c.to_string()).collect(),
            hosts: Vec::new(),
            days: 1,
        };
        issue(dir, &request)
            .with_context(|| format!("issue certificates into {}", dir.display()))?;
        Ok(Certs {
            dir: dir.to_path_buf(),
        })
    }

    /// The certificates already in `dir` (as `tenure certs` or [`Certs::issue`] wrote them).
    pub fn at(dir: &Path) -> Certs {
        Certs {
            dir: dir.to_path_buf(),
        }
    }

    /// The directory (what `tenure server --tls-dir` takes).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate's file.
    pub fn ca(&self) -> PathBuf {
        self.dir.join(files::CA)
    }

    /// The CA and client `client`'s certificate and key.
    pub fn client_files(&self, client: &str) -> TlsFiles {
        TlsFiles {
            ca: self.ca(),
            cert: self.dir.join(files::client(client)),
            key: self.dir.join(files::client_key(client)),
        }
    }

    /// gRPC client TLS: trust the CA, and present client `client`'s certificate if given.
    pub fn grpc(&self, client: Option<&str>) -> anyhow::Result<tonic::transport::ClientTlsConfig> {
        let read = |path: PathBuf| {
            std::fs::read(&path).with_context(|| format!("read {}", path.display()))
        };
        let config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read(self.ca())?));
        Ok(match client {
            Some(client) => {
                let f = self.client_files(client);
                config.identity(tonic::transport::Identity::from_pem(
                    read(f.cert)?,
                    read(f.key)?,
                ))
            }
            None => config,
        })
    }

    /// A client of the nodes' HTTP ports over TLS: as client `client`, or with no client
    /// certificate at all.
    pub fn http(&self, client: Option<&str>) -> anyhow::Result<HttpClient> {
        Ok(match client {
            Some(client) => HttpClient::from_files(&self.client_files(client))
                .with_context(|| format!("load client {client}'s certificate"))?,
            None => HttpClient::tls(crate::flood::anonymous_connector(&self.ca(), b"http/1.1")?),
        })
    }

    /// The query of a `tenure://` URL that makes the client library speak TLS as `client`:
    /// `ca=…&cert=…&key=…`.
    pub fn url_query(&self, client: &str) -> String {
        let f = self.client_files(client);
        format!(
            "ca={}&cert={}&key={}",
            f.ca.display(),
            f.cert.display(),
            f.key.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_make_every_kind_of_client() {
        let dir = tempfile::tempdir().unwrap();
        let certs = Certs::issue(&dir.path().join("certs"), "t", 1..=3, &["admin"]).unwrap();
        assert!(certs.grpc(Some("admin")).is_ok() && certs.grpc(None).is_ok());
        assert!(certs.http(Some("admin")).unwrap().is_tls());
        assert!(certs.http(None).unwrap().is_tls());
        assert!(
            certs.http(Some("nobody")).is_err(),
            "no certificate was issued for it"
        );
        let q = certs.url_query("admin");
        assert!(
            q.starts_with("ca=") && q.contains("&cert=") && q.contains("&key="),
            "{q}"
        );
    }
}
