//! A data directory remembers which node of which cluster wrote it: a copy started as
//! another node, or in another cluster, is refused with an error that says so, and the
//! directory is left as found.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use tenure_server::{check_identity, ServerError, IDENTITY_FILE};

#[test]
fn the_first_start_records_the_identity_and_later_starts_must_match_it() {
    let dir = tempfile::tempdir().unwrap();
    check_identity(dir.path(), 2, "prod").expect("first start writes the identity");
    let path = dir.path().join(IDENTITY_FILE);
    let written = fs::read_to_string(&path).unwrap();
    assert_eq!(written, "cluster=prod\nnode=2\n");
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    check_identity(dir.path(), 2, "prod").expect("the same node restarts");

    let other_node = check_identity(dir.path(), 3, "prod").unwrap_err();
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

    let other_cluster = check_identity(dir.path(), 2, "staging").unwrap_err();
    assert!(
        matches!(&other_cluster, ServerError::WrongIdentity { found_cluster, .. } if found_cluster == "prod"),
        "{other_cluster:?}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), written, "left as found");
}
