//! Disaster recovery on disk: the backup file (`tenure backup`), laying out a member of a
//! new cluster generation from it (`tenure restore`), and starting a one-voter generation
//! from a surviving member's own data (`tenure recover`). The token jump itself is the
//! core's ([`tenure_core::generation`]); this module reads and writes files.
//!
//! # The backup file
//!
//! ```text
//! tenure-backup 1\n
//! {"cluster_id":…,"generation":…,"index":…,"term":…,"voters":[…],"learners":[…],
//!  "bytes":N,"sha256":"…","taken_unix_ms":…,"server_version":"…"}\n
//! N bytes: the state machine at `index`, as the node's snapshots encode it
//! ```
//!
//! The server sends the header with the checksum it computed over the state's bytes;
//! `tenure backup` checks the bytes it received against it before it keeps the file, and
//! `tenure backup verify` and `tenure restore` check the file again.

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use tenure_core::generation::{self, GenerationError, Start};
use tenure_core::storage::Storage as _;
use tenure_core::types::{Index, Membership, NodeId, Term};

/// The file in a data directory that names the node and cluster it belongs to (and its
/// generation, once restored or recovered).
pub const IDENTITY_FILE: &str = "tenure-identity";

/// The first line of every backup file.
pub const BACKUP_MAGIC: &str = "tenure-backup 1";

/// What a backup holds besides the state's bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// The cluster it was taken from.
    pub cluster_id: String,
    /// That cluster's generation.
    pub generation: u64,
    /// The committed index the state is at.
    pub index: Index,
    /// The term of the entry at `index`.
    pub term: Term,
    /// The voters at `index`.
    pub voters: Vec<NodeId>,
    /// The learners at `index`.
    pub learners: Vec<NodeId>,
    /// How many bytes of state follow the header.
    pub bytes: u64,
    /// SHA-256 of those bytes, in hex.
    pub sha256: String,
    /// When the leader took it (milliseconds since 1970 by its clock; for people only).
    pub taken_unix_ms: u64,
    /// The version of the server that took it.
    pub server_version: String,
}

impl From<tenure_proto::v1::BackupHeader> for BackupHeader {
    /// The header as `Cluster.Backup` sends it.
    fn from(h: tenure_proto::v1::BackupHeader) -> BackupHeader {
        BackupHeader {
            cluster_id: h.cluster_id,
            generation: h.generation,
            index: h.index,
            term: h.term,
            voters: h.voters,
            learners: h.learners,
            bytes: h.bytes,
            sha256: h.sha256,
            taken_unix_ms: h.taken_unix_ms,
            server_version: h.server_version,
        }
    }
}

/// What can go wrong with a backup, a restore or a recovery.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Reading or writing a file failed.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// The file is not a backup, or is damaged.
    #[error("{path} is not a usable backup: {why}")]
    BadBackup {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The state cannot start a new generation.
    #[error(transparent)]
    Generation(#[from] GenerationError),
    /// The data directory already holds a member's state.
    #[error("{0} already holds state: restore and recover write into an empty directory")]
    NotEmpty(PathBuf),
    /// The write-ahead log refused.
    #[error("storage in {dir}: {error}")]
    Storage {
        /// The data directory.
        dir: PathBuf,
        /// What failed.
        error: String,
    },
    /// Another survivor holds a longer log: recovering from this one would lose entries.
    #[error(
        "{other} holds a longer log (last entry {other_index} of term {other_term}) than \
         {this} (last entry {this_index} of term {this_term}): recover from it instead"
    )]
    NotMostUpToDate {
        /// This member's data directory.
        this: PathBuf,
        /// Its last index and term.
        this_index: Index,
        /// …
        this_term: Term,
        /// The survivor with the longer log.
        other: PathBuf,
        /// Its last index and term.
        other_index: Index,
        /// …
        other_term: Term,
    },
    /// A configuration value is unusable.
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RestoreError + '_ {
    move |error| RestoreError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a backup file at `path` (through a temporary file beside it, fsynced, then
/// renamed): `header`, then `state`, which must match the header's length and checksum.
pub fn write_backup(path: &Path, header: &BackupHeader, state: &[u8]) -> Result<(), RestoreError> {
    check(path, header, state)?;
    let tmp = path.with_extension("partial");
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    let head = serde_json::to_string(header).expect("a header encodes");
    f.write_all(format!("{BACKUP_MAGIC}\n{head}\n").as_bytes())
        .and_then(|()| f.write_all(state))
        .and_then(|()| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(())
}

/// `state` against `header`'s length and checksum.
fn check(path: &Path, header: &BackupHeader, state: &[u8]) -> Result<(), RestoreError> {
    let bad = |why: String| RestoreError::BadBackup {
        path: path.to_path_buf(),
        why,
    };
    if state.len() as u64 != header.bytes {
        return Err(bad(format!(
            "the header says {} bytes of state, {} are there",
            header.bytes,
            state.len()
        )));
    }
    let sum = sha256_hex(state);
    if sum != header.sha256 {
        return Err(bad(format!(
            "the state's SHA-256 is {sum}, the header says {}",
            header.sha256
        )));
    }
    Ok(())
}

/// The header and state of the backup at `path`, checked (magic, length, checksum).
pub fn read_backup(path: &Path) -> Result<(BackupHeader, Vec<u8>), RestoreError> {
    let bad = |why: String| RestoreError::BadBackup {
        path: path.to_path_buf(),
        why,
    };
    let f = std::fs::File::open(path).map_err(io(path))?;
    let mut r = std::io::BufReader::new(f);
    let mut line = String::new();
    r.read_line(&mut line).map_err(io(path))?;
    if line.trim_end() != BACKUP_MAGIC {
        return Err(bad(format!("it does not start with {BACKUP_MAGIC:?}")));
    }
    line.clear();
    r.read_line(&mut line).map_err(io(path))?;
    let header: BackupHeader =
        serde_json::from_str(&line).map_err(|e| bad(format!("its header: {e}")))?;
    let mut state = Vec::new();
    r.read_to_end(&mut state).map_err(io(path))?;
    check(path, &header, &state)?;
    Ok((header, state))
}

/// What `tenure backup verify` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The file's header.
    pub header: BackupHeader,
    /// Sessions, elections and fenced keys in the state.
    pub sessions: usize,
    /// …
    pub elections: usize,
    /// …
    pub keys: usize,
    /// The highest token the state issued.
    pub max_token: u64,
}

/// Reads and checks the backup at `path` and decodes its state.
pub fn verify(path: &Path) -> Result<Summary, RestoreError> {
    let (header, state) = read_backup(path)?;
    let sm = tenure_core::sm::StateMachine::restore(tenure_core::sm::SmLimits::default(), &state)
        .map_err(|e| RestoreError::BadBackup {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    if sm.applied_index() != header.index {
        return Err(RestoreError::BadBackup {
            path: path.to_path_buf(),
            why: format!(
                "the state is at index {}, the header says {}",
                sm.applied_index(),
                header.index
            ),
        });
    }
    let (sessions, elections, keys) = sm.counts();
    Ok(Summary {
        header,
        sessions,
        elections,
        keys,
        max_token: sm.max_token(),
    })
}

/// The identity file's fields: cluster, node, generation (0 when the file predates
/// generations).
pub fn read_identity(dir: &Path) -> Result<Option<(String, NodeId, u64)>, RestoreError> {
    let path = dir.join(IDENTITY_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    Ok(Some(parse_identity(&text)))
}

/// `cluster=…`, `node=…`, `generation=…` lines (a missing one: empty, 0, 0).
pub(crate) fn parse_identity(text: &str) -> (String, NodeId, u64) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    (
        field("cluster").unwrap_or_default(),
        field("node").and_then(|n| n.parse().ok()).unwrap_or(0),
        field("generation")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    )
}

/// Writes the identity file (0600, fsynced, the directory too); `create_new` unless
/// `replace`.
pub(crate) fn write_identity(
    dir: &Path,
    cluster: &str,
    node: NodeId,
    generation: u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join(IDENTITY_FILE);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let mut text = format!("cluster={cluster}\nnode={node}\n");
    if generation > 0 {
        text.push_str(&format!("generation={generation}\n"));
    }
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::File::open(dir)?.sync_all()
}

/// Lays out member `node` of generation `generation` of `cluster` in the empty (or absent)
/// directory `dir`, starting from `start`.
fn lay_out(
    dir: &Path,
    cluster: &str,
    node: NodeId,
    generation: u64,
    start: &Start,
) -> Result<(), RestoreError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let storage_err = |e: tenure_wal::WalError| RestoreError::Storage {
        dir: dir.to_path_buf(),
        error: e.to_string(),
    };
    if std::fs::read_dir(dir).map_err(io(dir))?.next().is_some() {
        return Err(RestoreError::NotEmpty(dir.to_path_buf()));
    }
    let mut storage = tenure_wal::FileStorage::open(dir, tenure_wal::WalOptions::default())
        .map_err(storage_err)?;
    storage
        .persist(Some(&start.hard_state), Some(&start.snapshot), &[])
        .map_err(storage_err)?;
    drop(storage);
    write_identity(dir, cluster, node, generation).map_err(io(dir))
}

/// What `tenure restore` does for one member.
#[derive(Clone, Debug)]
pub struct RestorePlan {
    /// The backup file.
    pub backup: PathBuf,
    /// The new member's data directory (empty or absent).
    pub data_dir: PathBuf,
    /// The new member's id.
    pub id: NodeId,
    /// The new cluster's voters (every member of it, this one included).
    pub voters: Vec<NodeId>,
    /// The new generation; the backup's plus one if not given.
    pub generation: Option<u64>,
}

/// What a restore or a recovery did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Restored {
    /// The generation the member starts in.
    pub generation: u64,
    /// The index and term its state is at.
    pub index: Index,
    /// …
    pub term: Term,
    /// Every token the new generation issues is above this.
    pub token_floor: u64,
    /// The highest token the old state had issued.
    pub old_max_token: u64,
}

/// Lays out one member of a new cluster from a backup (`tenure restore`).
pub fn restore(plan: &RestorePlan) -> Result<Restored, RestoreError> {
    let (header, state) = read_backup(&plan.backup)?;
    if !plan.voters.contains(&plan.id) {
        return Err(RestoreError::Invalid(format!(
            "node {} is not among the voters {:?}",
            plan.id, plan.voters
        )));
    }
    let generation = plan.generation.unwrap_or(header.generation + 1);
    let sm = tenure_core::sm::StateMachine::restore(tenure_core::sm::SmLimits::default(), &state)
        .map_err(GenerationError::from)?;
    let old_max_token = sm.max_token();
    let membership = Membership::new(plan.voters.iter().copied());
    let start = generation::jump(
        sm,
        header.index,
        header.term,
        membership,
        header.generation,
        generation,
    )?;
    lay_out(
        &plan.data_dir,
        &header.cluster_id,
        plan.id,
        generation,
        &start,
    )?;
    Ok(Restored {
        generation,
        index: header.index,
        term: header.term,
        token_floor: generation::token_floor(generation),
        old_max_token,
    })
}

/// The last index and term in a member's data directory, and its state.
fn open_member(dir: &Path) -> Result<tenure_core::types::Recovered, RestoreError> {
    let mut storage = tenure_wal::FileStorage::open(dir, tenure_wal::WalOptions::default())
        .map_err(|e| RestoreError::Storage {
            dir: dir.to_path_buf(),
            error: e.to_string(),
        })?;
    storage.recover().map_err(|e| RestoreError::Storage {
        dir: dir.to_path_buf(),
        error: e.to_string(),
    })
}

fn last(recovered: &tenure_core::types::Recovered) -> (Index, Term) {
    match (recovered.entries.last(), &recovered.snapshot) {
        (Some(e), _) => (e.index, e.term),
        (None, Some(s)) => (s.index, s.term),
        (None, None) => (0, 0),
    }
}

/// What `tenure recover` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// What the member starts from.
    pub restored: Restored,
    /// Where its old data went.
    pub old_data: PathBuf,
    /// The commit index its disk recorded: entries after it were not known committed here
    /// and are kept (committed now); entries that only the lost members held are gone.
    pub recorded_commit: Index,
}

/// Starts a one-voter generation from the stopped member in `dir` (`tenure recover`):
/// refuses if any of `survivors` (other stopped members' data directories) holds a longer
/// log; otherwise moves `dir` aside (`DIR.before-recover-gN`) and lays out in `dir` a
/// member whose only voter is itself, in the next generation, from every entry its log
/// held.
pub fn recover(dir: &Path, survivors: &[PathBuf]) -> Result<Recovery, RestoreError> {
    let (cluster, node, old_generation) = read_identity(dir)?.ok_or_else(|| {
        RestoreError::Invalid(format!(
            "{} has no {IDENTITY_FILE}: not a member's data directory",
            dir.display()
        ))
    })?;
    let recovered = open_member(dir)?;
    let (this_index, this_term) = last(&recovered);
    for other in survivors {
        let theirs = open_member(other)?;
        let (other_index, other_term) = last(&theirs);
        if (other_term, other_index) > (this_term, this_index) {
            return Err(RestoreError::NotMostUpToDate {
                this: dir.to_path_buf(),
                this_index,
                this_term,
                other: other.clone(),
                other_index,
                other_term,
            });
        }
    }
    let (sm, index, term) = generation::replay(&recovered)?;
    let old_max_token = sm.max_token();
    let generation = old_generation + 1;
    let mut start = generation::jump(
        sm,
        index,
        term,
        Membership::new([node]),
        old_generation,
        generation,
    )?;
    // The term this member had seen, which may be past its last entry's.
    start.hard_state.term = start.hard_state.term.max(recovered.hard_state.term);
    let aside = PathBuf::from(format!("{}.before-recover-g{generation}", dir.display()));
    if aside.exists() {
        return Err(RestoreError::NotEmpty(aside));
    }
    std::fs::rename(dir, &aside).map_err(io(dir))?;
    lay_out(dir, &cluster, node, generation, &start)?;
    Ok(Recovery {
        restored: Restored {
            generation,
            index,
            term,
            token_floor: generation::token_floor(generation),
            old_max_token,
        },
        old_data: aside,
        recorded_commit: recovered.hard_state.commit,
    })
}
