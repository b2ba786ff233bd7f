//! Free loopback ports, by one rule: drawn below the kernel's ephemeral range (32768 and up on
//! Linux), so that an outgoing connection can never take the port of a node that is down for
//! a restart, as a port from `bind(0)` could.

use std::net::{SocketAddr, TcpListener};

use anyhow::bail;

/// Where ports are drawn from.
pub const PORT_RANGE: std::ops::Range<u16> = 20_000..32_000;

/// `n` distinct loopback ports that were free a moment ago.
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    // A cheap pseudo-random walk seeded by the clock and the process id, so that processes
    // looking at once seldom try the same ports; each candidate is checked by binding it, and
    // the held listeners keep the candidates distinct until all are found.
    let mut state = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    let span = u64::from(PORT_RANGE.end - PORT_RANGE.start);
    let (mut held, mut ports) = (Vec::new(), Vec::new());
    for _ in 0..10_000 {
        if ports.len() == n {
            return Ok(ports);
        }
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let port = PORT_RANGE.start + ((state >> 33) % span) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
            ports.push(port);
        }
    }
    bail!("cannot find {n} free loopback ports in {PORT_RANGE:?}")
}

/// `n` groups of `K` free loopback addresses: for example a peer, a client and an HTTP
/// address for each of `n` nodes of another system.
pub fn free_addrs<const K: usize>(n: usize) -> anyhow::Result<Vec<[SocketAddr; K]>> {
    let ports = free_ports(n * K)?;
    Ok(ports
        .chunks_exact(K)
        .map(|group| std::array::from_fn(|j| SocketAddr::from(([127, 0, 0, 1], group[j]))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports = free_ports(30).unwrap();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), 30);
        for p in &ports {
            assert!(PORT_RANGE.contains(p), "{p}");
            TcpListener::bind(("127.0.0.1", *p)).unwrap();
        }
        let groups = free_addrs::<3>(2).unwrap();
        assert_eq!(groups.len(), 2);
        assert!(groups.iter().flatten().all(|a| a.ip().is_loopback()));
    }
}
