//! A write workload that must see no error while operations run.

use std::time::Instant;

use crate::cluster::Cluster;
use crate::{ms, secs};

/// A key and the value written to it.
pub type KeyValue = (String, Vec<u8>);

/// Writers, each leading its own election and putting one new key after another with its
/// token, through a [`crate::Client`] that follows the leader — the load under which operations
/// (membership changes, transfers) must not make a client see an error. Every write it was
/// told succeeded is kept, to be read back at the end ([`crate::missing_keys`]).
pub struct Writers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acked: std::sync::Arc<std::sync::Mutex<Vec<KeyValue>>>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    /// Starts `writers` writers that reach the cluster through the nodes `through`.
    pub async fn start(c: &mut Cluster, through: &[u64], writers: usize) -> Writers {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for w in 0..writers {
            let mut client = c.client_for(through);
            let election = format!("writer-{w}");
            let (_, token) = client.writer_token(&election).await;
            let (stop, acked, errors) = (stop.clone(), acked.clone(), errors.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{w}-{i}");
                    let value = format!("{w}:{i}").into_bytes();
                    match client.put(&key, &value, &election, token, secs(10)).await {
                        Ok(_) => lock(&acked).push((key, value)),
                        Err(e) => lock(&errors).push(format!("{key}: {e:?}")),
                    }
                    i += 1;
                    tokio::time::sleep(ms(5)).await;
                }
            }));
        }
        Writers {
            stop,
            acked,
            errors,
            tasks,
        }
    }

    /// How many writes were acknowledged so far.
    pub fn acked(&self) -> usize {
        lock(&self.acked).len()
    }

    /// Waits (at most 10 s) until 20 more writes than now are acknowledged: the cluster
    /// still makes progress.
    pub async fn go_on(&self, what: &str) {
        let before = self.acked();
        let deadline = Instant::now() + secs(10);
        while self.acked() < before + 20 {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {} writes acknowledged, errors {:?}",
                self.acked(),
                lock(&self.errors)
            );
            tokio::time::sleep(ms(10)).await;
        }
    }

    /// Stops the writers: the acknowledged writes and every error a writer saw.
    pub async fn stop(self) -> (Vec<KeyValue>, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("writer task");
        }
        let acked = lock(&self.acked).clone();
        let errors = lock(&self.errors).clone();
        (acked, errors)
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
