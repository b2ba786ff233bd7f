//! Raw connections for the tests that attack a node: from a chosen loopback address, read
//! until closed, and the peer frames' checksum computed without the code under test.

use std::net::SocketAddr;
use std::time::Duration;

/// A TCP connection to `to` from 127.0.0.`last_octet` (Linux routes all of 127/8 to
/// loopback), so that a test's sockets count against a per-address limit of their own.
pub async fn connect_from(last_octet: u8, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, last_octet)),
            0,
        ))
        .expect("bind a loopback source address");
    socket.connect(to).await.expect("TCP connect")
}

/// Reads `stream` until its peer closes it (or resets it), for at most `within`; whether
/// it was closed in time.
pub async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 256];
    let closed = async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    tokio::time::timeout(within, closed).await.is_ok()
}

/// CRC-32C (Castagnoli), bit by bit: the checksum of peer frames, for tests that forge
/// them, computed without the code under test.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
