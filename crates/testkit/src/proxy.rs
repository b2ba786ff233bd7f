//! A TCP proxy in front of the nodes' client ports that can cut every connection, or hold
//! every byte back for a while.

use std::net::SocketAddr;

/// A TCP proxy in front of each node's client port; `cut` closes every connection (both
/// ways, as a middlebox that drops them would) and refuses to forward new ones. The CLI's
/// `tenure run` tests cut a runner off with it; the fate-sharing tests end a client's
/// connection with it while the client's streams are still open, as a dying process's
/// kernel would. `set_delay` holds every byte back for a while in both directions (a slow
/// network between one client and its servers), which opens the window between a client's
/// read and its write wide enough to put something else into it.
pub struct Proxy {
    addrs: Vec<SocketAddr>,
    /// The cluster URL's query (TLS files): the proxy forwards TLS as it is.
    query: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
    /// How long every chunk is held back, in microseconds.
    delay: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Proxy {
    /// One proxy port per target, each forwarding to its target; `query` is the cluster
    /// URL's (its TLS files: the proxy forwards TLS as it is).
    pub fn start(targets: &[SocketAddr], query: &str) -> Proxy {
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let delay = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut addrs = Vec::new();
        for &target in targets {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
            addrs.push(listener.local_addr().expect("an address"));
            let (cut, conns, delay) = (cut.clone(), conns.clone(), delay.clone());
            std::thread::spawn(move || {
                for inbound in listener.incoming() {
                    let Ok(inbound) = inbound else { continue };
                    if cut.load(std::sync::atomic::Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let Ok(outbound) = std::net::TcpStream::connect(target) else {
                        continue;
                    };
                    let mut held = conns
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    for s in [&inbound, &outbound] {
                        if let Ok(s) = s.try_clone() {
                            held.push(s);
                        }
                    }
                    drop(held);
                    pipe(&inbound, &outbound, &delay);
                    pipe(&outbound, &inbound, &delay);
                }
            });
        }
        Proxy {
            addrs,
            query: query.to_string(),
            cut,
            conns,
            delay,
        }
    }

    /// Hold every chunk back for `delay` in each direction from now on (zero: forward at
    /// once), on connections open and to come.
    pub fn set_delay(&self, delay: std::time::Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.delay
            .store(micros, std::sync::atomic::Ordering::SeqCst);
    }

    /// The proxy's addresses, with `discover=false`: a runner behind it reaches the cluster
    /// only through it (as a client behind a load balancer does), never at the members' own
    /// addresses, so the cut isolates it.
    pub fn url(&self) -> String {
        let a: Vec<String> = self.addrs.iter().map(|a| a.to_string()).collect();
        let sep = if self.query.is_empty() { "?" } else { "&" };
        format!("tenure://{}{}{sep}discover=false", a.join(","), self.query)
    }

    /// The proxy's addresses, one per target, in order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Close every connection, both ways, and forward no new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self
            .conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Forward what `from` reads to `to`, each chunk `delay` after it was read, until either
/// side ends; then close both. A reader thread stamps the chunks and a writer thread
/// forwards them in order, so a delay adds latency, never a queue.
fn pipe(
    from: &std::net::TcpStream,
    to: &std::net::TcpStream,
    delay: &std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::io::{Read as _, Write as _};
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let delay = delay.clone();
    let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
    let reader = from.try_clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let micros = delay.load(std::sync::atomic::Ordering::SeqCst);
                    let due = std::time::Instant::now() + std::time::Duration::from_micros(micros);
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, chunk) in rx {
            std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
        if let Ok(from) = reader {
            let _ = from.shutdown(std::net::Shutdown::Both);
        }
    });
}
