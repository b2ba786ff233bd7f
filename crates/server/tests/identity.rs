//! A data directory remembers which node of which cluster wrote it: a copy started as
//! another node, or in another cluster, is refused with an error that says so, and the
//! directory is left as found. A directory that holds Raft state but lost its identity file
//! is refused too: it is someone's, and nothing says whose.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use tenure_server::{check_identity, ServerError, IDENTITY_FILE};

#[test]
fn the_first_start_records_the_identity_and_later_starts_must_match_it() {
    let dir = tempfile::tempdir().unwrap();
    check_identity(dir.path(), 2, "prod", false).expect("first start writes the identity");
    let path = dir.path().join(IDENTITY_FILE);
    let written = fs::read_to_string(&path).unwrap();
    assert_eq!(written, "cluster=prod\nnode=2\n");
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    check_identity(dir.path(), 2, "prod", false).expect("the same node restarts");

    let other_node = check_identity(dir.path(), 3, "prod", true).unwrap_err();
    assert!(
        matches!(
            &other_node,
            ServerError::WrongIdentity {
                found_node: 2,
                node: 3,
                ..
            }
        ),
        "{other_node:?}"
    );
    let message = other_node.to_string();
    assert!(
        message.contains("belongs to node 2 of cluster \"prod\""),
        "{message}"
    );
    assert!(message.contains("not to node 3"), "{message}");

    let other_cluster = check_identity(dir.path(), 2, "staging", true).unwrap_err();
    assert!(
        matches!(&other_cluster, ServerError::WrongIdentity { found_cluster, .. } if found_cluster == "prod"),
        "{other_cluster:?}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), written, "left as found");
}

/// Before, a missing identity file was written afresh whatever the directory held, so a
/// copy of node 1's directory without the file started as any node id, with node 1's vote
/// and log.
#[test]
fn a_log_without_an_identity_file_is_refused_and_an_empty_one_is_a_first_start() {
    use tenure_core::storage::Storage as _;
    use tenure_core::types::HardState;
    use tenure_wal::{FileStorage, WalOptions};
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
        let voted = HardState {
            term: 3,
            vote: Some(1),
            commit: 0,
        };
        log.persist(Some(&voted), None, &[]).unwrap();
    }
    let log = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    assert!(log.holds_state());
    let refused = check_identity(dir.path(), 2, "prod", log.holds_state()).unwrap_err();
    assert!(
        matches!(&refused, ServerError::IdentityMissing { node: 2, .. }),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("no tenure-identity file"),
        "{refused}"
    );
    assert!(!dir.path().join(IDENTITY_FILE).exists(), "left as found");

    let empty = tempfile::tempdir().unwrap();
    let log = FileStorage::open(empty.path(), WalOptions::default()).unwrap();
    assert!(!log.holds_state(), "a new log holds nothing");
    check_identity(empty.path(), 2, "prod", log.holds_state()).expect("a first start");
}
