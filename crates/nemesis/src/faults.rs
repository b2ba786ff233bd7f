//! Faults: a schedule drawn from the seed, and how each fault is applied to the real
//! processes and healed.
//!
//! The schedule (which fault, how long, the calm after it, the draw that picks the target)
//! is a pure function of the seed, so `--seed` replays it exactly. Targets such as "the
//! leader" are resolved when the fault starts, so a replay repeats the schedule, not the
//! interleaving of real processes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::{Cluster, Life};
use crate::history::{Micros, Outcome};
use crate::workload::{range, Client};

/// The kinds of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// SIGSTOP a node (the leader most often), SIGCONT it later.
    Pause,
    /// SIGKILL a node (the leader most often), restart it on its data later.
    Kill,
    /// SIGKILL every node, restart them all.
    KillAll,
    /// Cut one node (the leader most often) off from all others.
    Isolate,
    /// Cut the link between two nodes only; both still reach the rest (a non-transitive,
    /// partial partition).
    Bridge,
    /// Split the cluster into a majority and a minority that holds the leader.
    Split,
    /// Make one node's links one-way (the leader most often): it either hears the others
    /// but cannot reach them, or reaches them but cannot hear them.
    OneWay,
    /// The shape of the outcome bug: freeze the followers while a write is in flight at the
    /// leader, cut the leader off, resume the followers, wait for a new leader and a
    /// snapshot, heal; the old leader catches up by InstallSnapshot and answers the write.
    Targeted,
    /// `TransferLeadership` to another node.
    Transfer,
    /// `RemoveMember` of a follower, another fault while it is out, `AddMember` back.
    Membership,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Pause,
        FaultKind::Kill,
        FaultKind::KillAll,
        FaultKind::Isolate,
        FaultKind::Bridge,
        FaultKind::Split,
        FaultKind::OneWay,
        FaultKind::Targeted,
        FaultKind::Transfer,
        FaultKind::Membership,
    ];

    /// Name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Kill => "kill",
            FaultKind::KillAll => "kill-all",
            FaultKind::Isolate => "isolate",
            FaultKind::Bridge => "bridge",
            FaultKind::Split => "split",
            FaultKind::OneWay => "one-way",
            FaultKind::Targeted => "targeted",
            FaultKind::Transfer => "transfer",
            FaultKind::Membership => "membership",
        }
    }

    /// Relative frequency after every kind has run once.
    fn weight(self) -> u64 {
        match self {
            FaultKind::Pause => 4,
            FaultKind::Kill => 4,
            FaultKind::KillAll => 1,
            FaultKind::Isolate => 3,
            FaultKind::Bridge => 2,
            FaultKind::Split => 2,
            FaultKind::OneWay => 3,
            FaultKind::Targeted => 3,
            FaultKind::Transfer => 2,
            FaultKind::Membership => 2,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown fault {s:?}; one of {}", names.join(", "))
            })
    }
}

/// One scheduled fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// What.
    pub kind: FaultKind,
    /// A draw that picks the target when the fault starts.
    pub pick: u64,
    /// How long the fault lasts.
    pub hold_ms: u64,
    /// Calm after healing, before the next fault.
    pub calm_ms: u64,
}

/// The first `count` steps of the schedule of `seed` over `kinds`: every kind once in a
/// seeded order, then weighted draws. No kinds, no steps.
pub fn schedule(seed: u64, kinds: &[FaultKind], count: usize) -> Vec<Step> {
    if kinds.is_empty() {
        return Vec::new();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6e65_6d65_7369_7321);
    let mut first: Vec<FaultKind> = kinds.to_vec();
    first.sort();
    first.dedup();
    for i in (1..first.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        first.swap(i, j);
    }
    let total: u64 = first.iter().map(|k| k.weight()).sum();
    let mut out = Vec::with_capacity(count);
    for n in 0..count {
        let kind = if n < first.len() {
            first[n]
        } else {
            let mut w = rng.next_u64() % total.max(1);
            let mut chosen = first[0];
            for &k in &first {
                if w < k.weight() {
                    chosen = k;
                    break;
                }
                w -= k.weight();
            }
            chosen
        };
        out.push(Step {
            kind,
            pick: rng.next_u64(),
            hold_ms: range(&mut rng, 300, 2_500),
            calm_ms: range(&mut rng, 300, 1_200),
        });
    }
    out
}

/// One fault as it happened.
#[derive(Clone, Debug)]
pub struct Applied {
    /// What.
    pub kind: FaultKind,
    /// On whom, and how it went.
    pub what: String,
    /// When it started and ended.
    pub from: Micros,
    /// End.
    pub to: Micros,
}

/// Applies faults to a cluster and remembers what must be healed.
pub struct Nemesis {
    /// The cluster.
    pub cluster: Cluster,
    /// The nemesis's own client (admin calls and the targeted writer), recorded in the
    /// history like any other.
    pub client: Client,
    /// Nodes removed from the configuration and not yet added back.
    pub removed: BTreeSet<u64>,
    /// Faults applied.
    pub applied: Vec<Applied>,
    /// The servers' snapshot threshold (the targeted fault writes past it).
    pub snapshot_threshold: u64,
}

impl Nemesis {
    async fn leader_or_any(&self, pick: u64) -> (u64, bool) {
        let ids = self.cluster.ids();
        match self.cluster.leader().await {
            Some(l) => (l, true),
            None => (ids[(pick % ids.len() as u64) as usize], false),
        }
    }

    /// The leader with probability 0.6 (when one is known), else a node drawn by `pick`.
    async fn target(&self, pick: u64) -> u64 {
        let ids = self.cluster.ids();
        if pick % 10 < 6 {
            if let Some(l) = self.cluster.leader().await {
                return l;
            }
        }
        ids[((pick / 10) % ids.len() as u64) as usize]
    }

    /// Apply one step and heal it; errors of the hook or the processes end the run.
    pub async fn apply(&mut self, step: &Step) -> anyhow::Result<()> {
        let clock = self.client.rec.clock();
        let from = clock.now();
        let hold = Duration::from_millis(step.hold_ms);
        let ids = self.cluster.ids();
        let what = match step.kind {
            FaultKind::Pause => {
                let t = self.target(step.pick).await;
                self.cluster.pause(t)?;
                tokio::time::sleep(hold).await;
                self.cluster.resume(t)?;
                format!("node {t} stopped {} ms", step.hold_ms)
            }
            FaultKind::Kill => {
                let t = self.target(step.pick).await;
                self.cluster.kill(t);
                tokio::time::sleep(hold).await;
                self.cluster.restart(t)?;
                format!("node {t} killed, restarted after {} ms", step.hold_ms)
            }
            FaultKind::KillAll => {
                for &id in &ids {
                    self.cluster.kill(id);
                }
                tokio::time::sleep(hold.min(Duration::from_millis(1_500))).await;
                for &id in &ids {
                    self.cluster.restart(id)?;
                }
                format!(
                    "all nodes killed, restarted after {} ms",
                    step.hold_ms.min(1_500)
                )
            }
            FaultKind::OneWay => {
                let t = self.target(step.pick).await;
                let deaf = (step.pick / 100).is_multiple_of(2);
                self.cluster.one_way(t, deaf).await?;
                tokio::time::sleep(hold).await;
                self.cluster.heal_network().await?;
                if deaf {
                    format!("node {t} deaf (hears no one, is heard) {} ms", step.hold_ms)
                } else {
                    format!(
                        "node {t} mute (hears all, is not heard) {} ms",
                        step.hold_ms
                    )
                }
            }
            FaultKind::Isolate => {
                let t = self.target(step.pick).await;
                let others: Vec<u64> = ids.iter().copied().filter(|&i| i != t).collect();
                self.cluster.cut(&[t], &others).await?;
                tokio::time::sleep(hold).await;
                self.cluster.heal_network().await?;
                format!("node {t} isolated {} ms", step.hold_ms)
            }
            FaultKind::Bridge => {
                let (l, _) = self.leader_or_any(step.pick).await;
                let others: Vec<u64> = ids.iter().copied().filter(|&i| i != l).collect();
                let o = others[(step.pick % others.len() as u64) as usize];
                self.cluster.cut(&[l], &[o]).await?;
                tokio::time::sleep(hold).await;
                self.cluster.heal_network().await?;
                format!(
                    "link {l}–{o} cut {} ms (both still reach the rest)",
                    step.hold_ms
                )
            }
            FaultKind::Split => {
                let (l, _) = self.leader_or_any(step.pick).await;
                // The leader and (for 5 nodes) one more node form the minority.
                let mut minority = vec![l];
                let others: Vec<u64> = ids.iter().copied().filter(|&i| i != l).collect();
                if ids.len() >= 5 {
                    minority.push(others[(step.pick % others.len() as u64) as usize]);
                }
                let majority: Vec<u64> = ids
                    .iter()
                    .copied()
                    .filter(|i| !minority.contains(i))
                    .collect();
                self.cluster.cut(&minority, &majority).await?;
                tokio::time::sleep(hold).await;
                self.cluster.heal_network().await?;
                format!("split {minority:?} | {majority:?} for {} ms", step.hold_ms)
            }
            FaultKind::Transfer => {
                let (l, known) = self.leader_or_any(step.pick).await;
                let others: Vec<u64> = ids
                    .iter()
                    .copied()
                    .filter(|&i| i != l && !self.removed.contains(&i))
                    .collect();
                let to = others[(step.pick % others.len() as u64) as usize];
                self.client.pin(l);
                let o = self.client.transfer_leadership(to).await;
                tokio::time::sleep(hold.min(Duration::from_millis(800))).await;
                let now = self.cluster.leader().await;
                format!(
                    "transfer {l}{} -> {to}: {}, leader now {now:?}",
                    if known { "" } else { " (no leader known)" },
                    o.name()
                )
            }
            FaultKind::Membership => self.membership(step).await?,
            FaultKind::Targeted => self.targeted(step).await?,
        };
        self.applied.push(Applied {
            kind: step.kind,
            what,
            from,
            to: clock.now(),
        });
        Ok(())
    }

    async fn membership(&mut self, step: &Step) -> anyhow::Result<String> {
        let ids = self.cluster.ids();
        let Some(l) = self.cluster.wait_leader(Duration::from_secs(3)).await else {
            return Ok("membership: no leader, skipped".into());
        };
        let followers: Vec<u64> = ids.iter().copied().filter(|&i| i != l).collect();
        let x = followers[(step.pick % followers.len() as u64) as usize];
        self.client.pin(l);
        let removed = self.client.remove_member(x).await;
        if matches!(removed, Outcome::Ok(_)) {
            self.removed.insert(x);
        }
        // Another fault while the configuration is smaller: freeze a remaining follower.
        let y = followers
            .iter()
            .copied()
            .find(|&f| f != x)
            .expect("a cluster of three or more has two followers");
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.cluster.pause(y)?;
        tokio::time::sleep(Duration::from_millis(step.hold_ms.min(1_000))).await;
        self.cluster.resume(y)?;
        let added = self.readd(Duration::from_secs(5)).await;
        Ok(format!(
            "remove {x} at leader {l}: {}; node {y} stopped meanwhile; add back: {}",
            removed.name(),
            if added { "ok" } else { "pending" }
        ))
    }

    /// Add every removed node back as a voter, within `within`; true once all are back.
    pub async fn readd(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let all: BTreeSet<u64> = self.cluster.ids().into_iter().collect();
        loop {
            // The configuration as the leader sees it decides what is missing, so that a
            // removal answered indeterminate is also repaired.
            if let Some(l) = self.cluster.leader().await {
                if let Some(s) = self.cluster.status(l, Duration::from_millis(300)).await {
                    let voters: BTreeSet<u64> = s.voters.iter().copied().collect();
                    if voters == all && s.learners.is_empty() {
                        self.removed.clear();
                        return true;
                    }
                    let missing: Vec<u64> = all.difference(&voters).copied().collect();
                    if let Some(&x) = missing.first() {
                        self.client.pin(l);
                        self.client.add_member(x, true).await;
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The outcome bug's shape; see [`FaultKind::Targeted`].
    async fn targeted(&mut self, step: &Step) -> anyhow::Result<String> {
        let ids = self.cluster.ids();
        let election = "nemesis-target";
        let key = "nemesis-target-key";
        let filler = "nemesis-filler-key";
        let Some(l) = self.cluster.wait_leader(Duration::from_secs(3)).await else {
            return Ok("targeted: no leader, skipped".into());
        };
        // A writer with a valid token: a long session, so that it outlives the fault
        // without keepalives (it is revoked at the end).
        self.client.pin(l);
        let Some((session, _)) = self.client.grant(10_000).await else {
            return Ok("targeted: grant failed, skipped".into());
        };
        self.client.pin(l);
        let (_, token) = self
            .client
            .campaign(election, session, Duration::from_secs(3))
            .await;
        let Some(token) = token else {
            self.client.revoke(session).await;
            return Ok("targeted: campaign failed, skipped".into());
        };
        let Some(l) = self.cluster.leader().await else {
            self.client.revoke(session).await;
            return Ok("targeted: leader lost, skipped".into());
        };
        let followers: Vec<u64> = ids.iter().copied().filter(|&i| i != l).collect();
        for &f in &followers {
            self.cluster.pause(f)?;
        }
        // The write in flight at the leader: its entry reaches the frozen followers' sockets.
        let mut writer = Client::new(
            "nemesis-target-writer",
            self.client.rec.clone(),
            self.client_nodes(),
            step.pick,
        );
        writer.pin(l);
        let write = tokio::spawn(async move {
            let o = writer
                .put(key, election, token, Duration::from_secs(25))
                .await;
            (writer, o)
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        self.cluster.cut(&[l], &followers).await?;
        for &f in &followers {
            self.cluster.resume(f)?;
        }
        // A new leader among the followers, then enough writes through it for a snapshot.
        let mut new_leader = None;
        for _ in 0..100 {
            let mut views = BTreeMap::new();
            for &f in &followers {
                if let Some(s) = self.cluster.status(f, Duration::from_millis(300)).await {
                    views.insert(f, s);
                }
            }
            if let Some((&f, _)) = views.iter().find(|(_, s)| s.role == "leader") {
                new_leader = Some(f);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut fillers = 0;
        if let Some(nl) = new_leader {
            let n = 2 * self.snapshot_threshold + 5;
            for _ in 0..n.min(200) {
                self.client.pin(nl);
                if matches!(
                    self.client
                        .put(filler, election, token, Duration::from_secs(2))
                        .await,
                    Outcome::Ok(_)
                ) {
                    fillers += 1;
                }
            }
        }
        let snap = followers.iter().any(|&f| self.cluster.has_snapshot(f));
        tokio::time::sleep(Duration::from_millis(step.hold_ms.min(500))).await;
        self.cluster.heal_network().await?;
        let (mut writer, answer) = write.await.expect("the targeted writer does not panic");
        // Reads after the answer: they show whether the write took effect.
        for _ in 0..3 {
            if matches!(writer.get(key).await, Outcome::Ok(_)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.client.revoke(session).await;
        Ok(format!(
            "leader {l} with a write in flight; followers {followers:?} frozen, leader cut off, \
             followers resumed; new leader {new_leader:?}, {fillers} more writes, snapshot on a \
             follower: {snap}; healed; the write was answered {}",
            match &answer {
                Outcome::Fail { reason, .. } => format!("fail {reason}"),
                o => o.name().to_string(),
            }
        ))
    }

    fn client_nodes(&self) -> crate::workload::Nodes {
        crate::workload::Nodes {
            channels: self.cluster.channels(),
        }
    }

    /// Undo every fault: resume, restart, unblock, add removed members back.
    pub async fn heal_all(&mut self) -> anyhow::Result<bool> {
        self.cluster.heal().await?;
        self.cluster.wait_leader(Duration::from_secs(20)).await;
        Ok(self.readd(Duration::from_secs(20)).await)
    }

    /// Whether every node's process is up.
    pub fn all_up(&self) -> bool {
        self.cluster
            .ids()
            .iter()
            .all(|&id| self.cluster.life(id) == Life::Up)
    }
}
