//! A typed specification of one `tenure server` node and the flags it renders to.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use tenure_core::config::timing;

use crate::ports::free_ports;

/// The addresses of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeAddrs {
    /// Raft peers.
    pub peer: SocketAddr,
    /// gRPC clients.
    pub client: SocketAddr,
    /// HTTP: `/status`, `/metrics`, the dashboard.
    pub http: SocketAddr,
}

impl NodeAddrs {
    /// `n` nodes' worth of free loopback addresses ([`free_ports`]).
    pub fn free(n: usize) -> anyhow::Result<Vec<NodeAddrs>> {
        let ports = free_ports(n * 3)?;
        let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        Ok(ports
            .chunks_exact(3)
            .map(|p| NodeAddrs {
                peer: at(p[0]),
                client: at(p[1]),
                http: at(p[2]),
            })
            .collect())
    }

    /// The value of a `--node` flag for node `id`: `ID=PEER,CLIENT,HTTP`, each address by
    /// IP, or by `host` with the same ports when given (a name such as `localhost`).
    pub fn flag(&self, id: u64, host: Option<&str>) -> String {
        match host {
            None => format!("{id}={},{},{}", self.peer, self.client, self.http),
            Some(h) => format!(
                "{id}={h}:{},{h}:{},{h}:{}",
                self.peer.port(),
                self.client.port(),
                self.http.port()
            ),
        }
    }
}

/// A node's timing in milliseconds: what `--tick-ms`, `--election-timeout-ms` and
/// `--heartbeat-ms` say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// One core tick.
    pub tick_ms: u64,
    /// The election timeout T.
    pub election_timeout_ms: u64,
    /// The heartbeat interval.
    pub heartbeat_ms: u64,
}

impl Timing {
    /// The server's defaults (`tenure_core::config::timing`).
    pub const DEFAULT: Timing = Timing {
        tick_ms: timing::TICK_MS,
        election_timeout_ms: timing::ELECTION_TIMEOUT_MS,
        heartbeat_ms: timing::HEARTBEAT_MS,
    };
}

impl Default for Timing {
    fn default() -> Timing {
        Timing::DEFAULT
    }
}

/// One `tenure server` node: everything its command line says.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Its id (≥ 1).
    pub id: u64,
    /// Its write-ahead log and snapshots.
    pub data_dir: PathBuf,
    /// The nodes its `--node` flags name (itself included), by id.
    pub members: BTreeMap<u64, NodeAddrs>,
    /// Name the members' addresses by this host instead of by IP.
    pub host: Option<String>,
    /// `--join`: wait to be added instead of bootstrapping.
    pub join: bool,
    /// `--cluster-id`, if not the server's default.
    pub cluster_id: Option<String>,
    /// `--tls-dir`: the certificates `tenure certs` wrote (TLS on every port).
    pub tls_dir: Option<PathBuf>,
    /// Its timing; `None` leaves the server's defaults unsaid (they are the same numbers,
    /// but a benchmark of "the defaults" should run whatever the server ships).
    pub timing: Option<Timing>,
    /// Fast election (the server's default); `false` passes `--no-fast-election`.
    pub fast_election: bool,
    /// `--fault-injection` (serve `POST /debug/block`).
    pub fault_injection: bool,
    /// More flags, as given (for example `--snapshot-threshold-entries 200`).
    pub args: Vec<String>,
}

impl NodeSpec {
    /// Node `id` of `members` on `data_dir`, with the default timing stated and nothing else.
    pub fn new(id: u64, data_dir: &Path, members: BTreeMap<u64, NodeAddrs>) -> NodeSpec {
        NodeSpec {
            id,
            data_dir: data_dir.to_path_buf(),
            members,
            host: None,
            join: false,
            cluster_id: None,
            tls_dir: None,
            timing: Some(Timing::DEFAULT),
            fast_election: true,
            fault_injection: false,
            args: Vec::new(),
        }
    }

    /// Its own addresses.
    pub fn addrs(&self) -> NodeAddrs {
        self.members[&self.id]
    }

    /// The arguments after `tenure`: `server --id … --node … …`.
    pub fn flags(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> =
            vec!["server".into(), "--id".into(), self.id.to_string().into()];
        let mut flag = |name: &str, value: OsString| {
            out.push(name.into());
            out.push(value);
        };
        flag("--data-dir", self.data_dir.clone().into());
        for (id, addrs) in &self.members {
            flag("--node", addrs.flag(*id, self.host.as_deref()).into());
        }
        if let Some(c) = &self.cluster_id {
            flag("--cluster-id", c.into());
        }
        if let Some(dir) = &self.tls_dir {
            flag("--tls-dir", dir.clone().into());
        }
        if let Some(t) = self.timing {
            flag("--tick-ms", t.tick_ms.to_string().into());
            flag(
                "--election-timeout-ms",
                t.election_timeout_ms.to_string().into(),
            );
            flag("--heartbeat-ms", t.heartbeat_ms.to_string().into());
        }
        let switches = [
            (self.join, "--join"),
            (!self.fast_election, "--no-fast-election"),
            (self.fault_injection, "--fault-injection"),
        ];
        out.extend(switches.iter().filter(|(on, _)| *on).map(|(_, s)| s.into()));
        out.extend(self.args.iter().map(OsString::from));
        out
    }

    /// The command that runs this node with the `tenure` binary `bin` (no colour codes in
    /// its log). Spawn it with [`crate::Proc::spawn`].
    pub fn command(&self, bin: &Path) -> Command {
        let mut cmd = Command::new(bin);
        cmd.args(self.flags()).env("NO_COLOR", "1");
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_renders_the_servers_flags() {
        let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let members: BTreeMap<u64, NodeAddrs> = (1..=2)
            .map(|i| {
                let base = 7000 + 10 * i as u16;
                (
                    i,
                    NodeAddrs {
                        peer: a(base),
                        client: a(base + 1),
                        http: a(base + 2),
                    },
                )
            })
            .collect();
        let mut spec = NodeSpec::new(2, Path::new("/d/n2"), members);
        spec.tls_dir = Some("/d/certs".into());
        spec.fast_election = false;
        spec.args = vec!["--request-timeout-ms".into(), "900".into()];
        let flags: Vec<String> = spec
            .flags()
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            flags.join(" "),
            "server --id 2 --data-dir /d/n2 \
             --node 1=127.0.0.1:7010,127.0.0.1:7011,127.0.0.1:7012 \
             --node 2=127.0.0.1:7020,127.0.0.1:7021,127.0.0.1:7022 \
             --tls-dir /d/certs --tick-ms 10 --election-timeout-ms 150 --heartbeat-ms 30 \
             --no-fast-election --request-timeout-ms 900"
        );
        spec.host = Some("localhost".into());
        spec.timing = None;
        let flags: Vec<String> = spec
            .flags()
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        assert!(flags.contains(&"1=localhost:7010,localhost:7011,localhost:7012".to_string()));
        assert!(!flags
            .iter()
            .any(|f| f == "--election-timeout-ms" || f == "--tick-ms"));
    }
}
