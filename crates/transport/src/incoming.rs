//! Where accepted connections come from: a listener of the transport's own, or a port
//! shared with other protocols, whose owner sorts connections and hands this transport
//! its share.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The source of a port's inbound connections.
#[derive(Debug)]
pub enum Incoming {
    /// A listener of this port's own.
    Listener(TcpListener),
    /// Connections handed over by the owner of a shared port (it accepted them and peeked
    /// at their first bytes, leaving them unread); `local` is the shared port's address.
    Handed {
        /// The shared port's address.
        local: SocketAddr,
        /// The connections; the port is closed once every sender is gone.
        rx: mpsc::Receiver<(TcpStream, SocketAddr)>,
    },
}

impl From<TcpListener> for Incoming {
    fn from(listener: TcpListener) -> Incoming {
        Incoming::Listener(listener)
    }
}

impl Incoming {
    /// The address connections arrive at.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Incoming::Listener(l) => l.local_addr(),
            Incoming::Handed { local, .. } => Ok(*local),
        }
    }

    /// The next connection; `None` once a handed-over port is closed. An error is the
    /// listener's (out of file descriptors, most likely): the caller backs off and retries.
    pub async fn accept(&mut self) -> Option<std::io::Result<(TcpStream, SocketAddr)>> {
        match self {
            Incoming::Listener(l) => Some(l.accept().await),
            Incoming::Handed { rx, .. } => rx.recv().await.map(Ok),
        }
    }
}
