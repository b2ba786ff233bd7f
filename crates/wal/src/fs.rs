//! The file system under the log: the operating system's ([`OsFs`]), or one in memory
//! ([`MemFs`]) that forgets, at a simulated power loss, whatever was not made durable.
//!
//! [`FileStorage`](crate::FileStorage) does all of its IO through [`FileSystem`], so that the
//! simulator runs the very code the server runs (the format, the write order, the fsyncs,
//! rotation, compaction, recovery from a torn tail) over a disk it can crash at any moment.
//! The trait is what the log needs and no more: append-only files, whole-file reads, renames,
//! removals and the fsyncs that make each of them durable.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Result, WalError};

/// Name of the lock file that keeps a second process out of the directory.
pub const LOCK_FILE: &str = "LOCK";

/// What the log does to its directory. Paths are the directory joined with a file name; the
/// log never makes subdirectories.
pub trait FileSystem: Clone + fmt::Debug + Send + Sync + 'static {
    /// A file open for appending.
    type File: LogFile;
    /// Held while the directory is open; dropping it releases the directory.
    type Lock: fmt::Debug + Send + Sync + 'static;

    /// Create `dir` (owner-only) if it is missing, durably; narrow an existing one that others
    /// may read to the owner.
    fn prepare_dir(&self, dir: &Path) -> Result<()>;
    /// Take the directory's lock, or fail with [`WalError::Locked`].
    fn lock_dir(&self, dir: &Path) -> Result<Self::Lock>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// A whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// A file's length (`NotFound` if it does not exist).
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// Create a file that must not exist yet, for appending.
    fn create_new(&self, path: &Path) -> io::Result<Self::File>;
    /// Create a file, or empty an existing one, for appending.
    fn create_truncate(&self, path: &Path) -> io::Result<Self::File>;
    /// Open an existing file for appending.
    fn open_append(&self, path: &Path) -> io::Result<Self::File>;
    /// Cut a file to `len` bytes and fsync it.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Remove a file (durable once the directory is fsynced).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Rename a file over another (durable once the directory is fsynced).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Fsync a directory: the creations, renames and removals in it become durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether compaction after a background snapshot may remove files on a thread of its
    /// own (the operating system's: unlinking large files takes time); an in-memory one
    /// removes them at once, so that a simulation stays deterministic.
    fn removes_in_background(&self) -> bool;
}

/// A file of the log, open for appending.
pub trait LogFile: fmt::Debug + Send + 'static {
    /// Append `buf` whole.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Make the data written so far durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Make the data and the metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
}

/// The operating system's file system: every file 0600, the directory 0700, an advisory
/// `flock` on `LOCK` holding the owner's pid.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsFs;

/// Permissions of every file the log creates: the owner's alone (the log holds sessions,
/// values and, later, credentials' hashes).
const FILE_MODE: u32 = 0o600;
/// Permissions of the data directory.
const DIR_MODE: u32 = 0o700;

impl LogFile for File {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&self) -> io::Result<()> {
        File::sync_all(self)
    }
}

impl FileSystem for OsFs {
    type File = File;
    type Lock = File;

    fn prepare_dir(&self, dir: &Path) -> Result<()> {
        if dir.is_dir() {
            let mode = fs::metadata(dir)
                .map_err(WalError::io("stat", dir))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))
                    .map_err(WalError::io("chmod 0700", dir))?;
            }
            return Ok(());
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(WalError::io("create directory", dir))?;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        self.sync_dir(parent)
            .map_err(WalError::io("fsync directory", parent))
    }

    /// The advisory lock (flock) on `LOCK`, released when the process exits or the lock is
    /// dropped; our pid goes into the file for the error message of the next one.
    fn lock_dir(&self, dir: &Path) -> Result<File> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .open(&path)
            .map_err(WalError::io("open", &path))?;
        match fs4::FileExt::try_lock(&file) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                let holder = fs::read_to_string(&path)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .map(|pid| format!(" (pid {pid})"))
                    .unwrap_or_default();
                return Err(WalError::Locked {
                    dir: dir.to_path_buf(),
                    holder,
                });
            }
            Err(fs4::TryLockError::Error(e)) => return Err(WalError::io("lock", &path)(e)),
        }
        file.set_len(0).map_err(WalError::io("truncate", &path))?;
        writeln!(file, "{}", std::process::id()).map_err(WalError::io("write", &path))?;
        Ok(file)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for item in fs::read_dir(dir)? {
            if let Ok(name) = item?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }

    fn create_new(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(path)
    }

    fn create_truncate(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new().append(true).open(path)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn removes_in_background(&self) -> bool {
        true
    }
}

/// A file system in memory that can lose power ([`MemFs::crash`]), for the simulator and
/// for crash tests: what survives is what a journaling file system guarantees, and no more.
///
/// - A file's bytes are durable up to its last `sync_data`/`sync_all`; a crash keeps those
///   and a prefix of the bytes appended since, which [`CrashChoices::unsynced_bytes`] picks
///   (possibly left as zeros: the length reached the disk, the data did not).
/// - Creations, renames and removals are durable once a directory is fsynced (which, as a
///   journal commit does, makes every earlier one durable); a crash keeps a prefix of those
///   made since, which [`CrashChoices::directory_changes`] picks.
/// - A crash releases every lock, and handles opened before it fail from then on.
///
/// Clones share the same files. Every operation takes one lock; the simulator is one thread.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    state: Arc<Mutex<MemState>>,
}

#[derive(Debug, Default)]
struct MemState {
    /// File contents by inode.
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    /// The names as the running process sees them.
    names: BTreeMap<PathBuf, u64>,
    /// The names a crash would leave, before the pending changes.
    durable: BTreeMap<PathBuf, u64>,
    /// Changes to `names` since the last directory fsync, oldest first.
    pending: Vec<DirChange>,
    /// Directories (durable at once: the log creates its directory before anything else).
    dirs: BTreeSet<PathBuf>,
    /// Locked directories, with the crash generation that took the lock.
    locked: BTreeMap<PathBuf, u64>,
    /// Bumped at every crash: handles and locks of an earlier generation are dead.
    generation: u64,
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    /// Bytes of `data` that are durable.
    synced: usize,
}

#[derive(Clone, Debug)]
enum DirChange {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    /// A rename is one change: a journal commits it whole.
    Rename(PathBuf, PathBuf, u64),
}

impl MemState {
    /// The file a name refers to now.
    fn file_mut(&mut self, path: &Path) -> io::Result<&mut Inode> {
        let inode = *self.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(self
            .inodes
            .get_mut(&inode)
            .expect("a live name has its inode"))
    }
}

impl DirChange {
    fn apply(&self, names: &mut BTreeMap<PathBuf, u64>) {
        match self {
            DirChange::Link(path, inode) => {
                names.insert(path.clone(), *inode);
            }
            DirChange::Unlink(path) => {
                names.remove(path);
            }
            DirChange::Rename(from, to, inode) => {
                names.remove(from);
                names.insert(to.clone(), *inode);
            }
        }
    }
}

/// What a power loss keeps of what was not made durable.
pub trait CrashChoices {
    /// How many of the `unsynced` bytes appended to `path` since its last fsync survive
    /// (clamped to `unsynced`), and whether they survive as zeros.
    fn unsynced_bytes(&mut self, path: &Path, unsynced: usize) -> (usize, bool);
    /// How many of the `pending` creations, renames and removals since the last directory
    /// fsync survive, oldest first (clamped to `pending`).
    fn directory_changes(&mut self, pending: usize) -> usize;
}

/// A power loss that keeps nothing unsynced.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoseEverythingUnsynced;

impl CrashChoices for LoseEverythingUnsynced {
    fn unsynced_bytes(&mut self, _: &Path, _: usize) -> (usize, bool) {
        (0, false)
    }

    fn directory_changes(&mut self, _: usize) -> usize {
        0
    }
}

/// A process that dies while the machine stays up: the kernel keeps every byte written
/// and every directory change, fsynced or not.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepEverything;

impl CrashChoices for KeepEverything {
    fn unsynced_bytes(&mut self, _: &Path, unsynced: usize) -> (usize, bool) {
        (unsynced, false)
    }

    fn directory_changes(&mut self, pending: usize) -> usize {
        pending
    }
}

/// What a crash left behind, for a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unsynced bytes across files at the crash.
    pub unsynced_bytes: usize,
    /// Of those, how many survived.
    pub kept_bytes: usize,
    /// Directory changes pending at the crash.
    pub pending_changes: usize,
    /// Of those, how many survived.
    pub kept_changes: usize,
}

/// A [`MemFs`] file handle.
#[derive(Debug)]
pub struct MemFile {
    fs: MemFs,
    inode: u64,
    generation: u64,
}

/// A [`MemFs`] directory lock.
#[derive(Debug)]
pub struct MemLock {
    fs: MemFs,
    dir: PathBuf,
    generation: u64,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut state = self.fs.state();
        if state.locked.get(&self.dir) == Some(&self.generation) {
            state.locked.remove(&self.dir);
        }
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn stale() -> io::Error {
    io::Error::other("a handle opened before the crash")
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> MemFs {
        MemFs::default()
    }

    fn state(&self) -> MutexGuard<'_, MemState> {
        // A panic while holding the lock leaves plain data, still consistent per operation.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Power loss: every file falls back to its durable bytes plus what `choices` keeps of
    /// the rest, the names to the durable ones plus a prefix of the pending changes; locks
    /// are released and open handles die.
    pub fn crash(&self, choices: &mut dyn CrashChoices) -> CrashReport {
        let mut state = self.state();
        let state = &mut *state;
        let mut report = CrashReport {
            pending_changes: state.pending.len(),
            ..CrashReport::default()
        };
        let kept = choices
            .directory_changes(state.pending.len())
            .min(state.pending.len());
        report.kept_changes = kept;
        for change in state.pending.drain(..).take(kept) {
            change.apply(&mut state.durable);
        }
        state.names = state.durable.clone();
        let live: BTreeSet<u64> = state.names.values().copied().collect();
        state.inodes.retain(|inode, _| live.contains(inode));
        for (path, inode) in &state.names {
            let file = state
                .inodes
                .get_mut(inode)
                .expect("a live name has its inode");
            let unsynced = file.data.len() - file.synced;
            if unsynced == 0 {
                continue;
            }
            report.unsynced_bytes += unsynced;
            let (keep, zeroed) = choices.unsynced_bytes(path, unsynced);
            let keep = keep.min(unsynced);
            report.kept_bytes += keep;
            file.data.truncate(file.synced + keep);
            if zeroed {
                file.data[file.synced..].fill(0);
            }
            file.synced = file.data.len();
        }
        state.locked.clear();
        state.generation += 1;
        report
    }

    fn link_new(&self, state: &mut MemState, path: &Path) -> MemFile {
        let inode = state.next_inode;
        state.next_inode += 1;
        state.inodes.insert(inode, Inode::default());
        let change = DirChange::Link(path.to_path_buf(), inode);
        change.apply(&mut state.names);
        state.pending.push(change);
        MemFile {
            fs: self.clone(),
            inode,
            generation: state.generation,
        }
    }

    /// Forget inodes no name (current or durable, or pending) refers to.
    fn collect(state: &mut MemState) {
        let mut live: BTreeSet<u64> = state.names.values().copied().collect();
        live.extend(state.durable.values().copied());
        for change in &state.pending {
            if let DirChange::Link(_, inode) | DirChange::Rename(_, _, inode) = change {
                live.insert(*inode);
            }
        }
        state.inodes.retain(|inode, _| live.contains(inode));
    }
}

impl LogFile for MemFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut state = self.fs.state();
        if state.generation != self.generation {
            return Err(stale());
        }
        let file = state.inodes.get_mut(&self.inode).ok_or_else(stale)?;
        file.data.extend_from_slice(buf);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.fs.state();
        if state.generation != self.generation {
            return Err(stale());
        }
        let file = state.inodes.get_mut(&self.inode).ok_or_else(stale)?;
        file.synced = file.data.len();
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
}

impl FileSystem for MemFs {
    type File = MemFile;
    type Lock = MemLock;

    fn prepare_dir(&self, dir: &Path) -> Result<()> {
        self.state().dirs.insert(dir.to_path_buf());
        Ok(())
    }

    fn lock_dir(&self, dir: &Path) -> Result<MemLock> {
        let mut state = self.state();
        if state.locked.contains_key(dir) {
            return Err(WalError::Locked {
                dir: dir.to_path_buf(),
                holder: String::new(),
            });
        }
        let generation = state.generation;
        state.locked.insert(dir.to_path_buf(), generation);
        Ok(MemLock {
            fs: self.clone(),
            dir: dir.to_path_buf(),
            generation,
        })
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state();
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(state
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| Some(p.file_name()?.to_str()?.to_string()))
            .collect())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.state();
        let inode = state.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(state.inodes[inode].data.clone())
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        let state = self.state();
        let inode = state.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(state.inodes[inode].data.len() as u64)
    }

    fn create_new(&self, path: &Path) -> io::Result<MemFile> {
        let mut state = self.state();
        if state.names.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: exists", path.display()),
            ));
        }
        Ok(self.link_new(&mut state, path))
    }

    fn create_truncate(&self, path: &Path) -> io::Result<MemFile> {
        let mut state = self.state();
        if let Some(&inode) = state.names.get(path) {
            let file = state
                .inodes
                .get_mut(&inode)
                .expect("a live name has its inode");
            file.data.clear();
            // Emptying a file is metadata a real disk may or may not have kept; the log
            // only empties temporary files, which recovery removes either way.
            file.synced = 0;
            return Ok(MemFile {
                fs: self.clone(),
                inode,
                generation: state.generation,
            });
        }
        Ok(self.link_new(&mut state, path))
    }

    fn open_append(&self, path: &Path) -> io::Result<MemFile> {
        let state = self.state();
        let inode = *state.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(MemFile {
            fs: self.clone(),
            inode,
            generation: state.generation,
        })
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut state = self.state();
        let file = state.file_mut(path)?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        file.data.truncate(len);
        file.synced = file.data.len();
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        if !state.names.contains_key(path) {
            return Err(not_found(path));
        }
        let change = DirChange::Unlink(path.to_path_buf());
        change.apply(&mut state.names);
        state.pending.push(change);
        MemFs::collect(&mut state);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state();
        let inode = *state.names.get(from).ok_or_else(|| not_found(from))?;
        let change = DirChange::Rename(from.to_path_buf(), to.to_path_buf(), inode);
        change.apply(&mut state.names);
        state.pending.push(change);
        MemFs::collect(&mut state);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state();
        let state = &mut *state;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        for change in state.pending.drain(..) {
            change.apply(&mut state.durable);
        }
        MemFs::collect(state);
        Ok(())
    }

    fn removes_in_background(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_synced_bytes_and_durable_names_only() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.prepare_dir(dir).unwrap();
        let a = dir.join("a");
        let mut file = fs.create_new(&a).unwrap();
        file.write_all(b"durable").unwrap();
        file.sync_data().unwrap();
        fs.sync_dir(dir).unwrap();
        file.write_all(b" lost").unwrap();
        let b = dir.join("b");
        fs.create_new(&b).unwrap().sync_all().unwrap();
        let report = fs.crash(&mut LoseEverythingUnsynced);
        assert_eq!(fs.read(&a).unwrap(), b"durable");
        assert!(fs.read(&b).is_err(), "b's name was never fsynced");
        assert_eq!((report.unsynced_bytes, report.pending_changes), (5, 1));
        assert!(
            file.write_all(b"x").is_err(),
            "handles die with the process"
        );
    }

    #[test]
    fn a_crash_keeps_a_prefix_of_directory_changes_and_of_unsynced_bytes() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.prepare_dir(dir).unwrap();
        let mut file = fs.create_new(&dir.join("tmp")).unwrap();
        file.write_all(b"abc").unwrap();
        fs.rename(&dir.join("tmp"), &dir.join("f")).unwrap();
        fs.crash(&mut KeepEverything);
        assert_eq!(fs.list(dir).unwrap(), vec!["f".to_string()]);
        assert_eq!(fs.read(&dir.join("f")).unwrap(), b"abc");
        let _lock = fs.lock_dir(dir).expect("the crash released nothing held");
        assert!(matches!(fs.lock_dir(dir), Err(WalError::Locked { .. })));
    }
}
