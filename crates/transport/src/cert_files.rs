//! The file names `tenure certs` writes, relative to its directory (known to the server
//! without the `certs` feature, which warns when the CA's key sits beside a node's files).

/// The CA certificate.
pub const CA: &str = "ca.pem";
/// The CA's private key (keep it offline in production).
pub const CA_KEY: &str = "ca-key.pem";
/// Node `id`'s certificate.
pub fn node(id: u64) -> String {
    format!("node-{id}.pem")
}
/// Node `id`'s private key.
pub fn node_key(id: u64) -> String {
    format!("node-{id}-key.pem")
}
/// Node `id`'s bundle: a directory holding exactly what node `id` needs (the CA
/// certificate, its own certificate and key), to copy to that node and pass as its
/// `--tls-dir`. Never the CA's key.
pub fn node_dir(id: u64) -> String {
    format!("node-{id}")
}
/// Client `name`'s certificate.
pub fn client(name: &str) -> String {
    format!("client-{name}.pem")
}
/// Client `name`'s private key.
pub fn client_key(name: &str) -> String {
    format!("client-{name}-key.pem")
}
/// Client `name`'s PKCS#12 bundle (certificate, key and CA) for a browser.
pub fn client_p12(name: &str) -> String {
    format!("client-{name}.p12")
}
