//! Snapshots taken in the background (`Config::snapshot_in_background`): the node hands out a
//! frozen image of its state, goes on applying entries, and compacts its log only when the
//! driver reports the snapshot taken — and drops it if a leader's snapshot got further first.

mod common;

use common::Cluster;
use tenure_core::sm::{Command, StateMachine};
use tenure_core::types::NodeId;

const THRESHOLD: u64 = 20;

fn cluster() -> Cluster {
    Cluster::with_config(3, |cfg| {
        cfg.snapshot_in_background = true;
        cfg.snapshot_threshold_entries = THRESHOLD;
        cfg.snapshot_grows_with_state = false;
    })
}

/// Grant `n` sessions one committed entry at a time.
fn grant(c: &mut Cluster, leader: NodeId, n: usize) {
    for _ in 0..n {
        c.node_mut(leader)
            .propose(Command::Grant { ttl_ticks: 10_000 })
            .expect("leader accepts");
        c.deliver_all();
    }
}

#[test]
fn the_image_is_the_state_at_its_index_and_the_log_is_compacted_only_once_it_is_taken() {
    let mut c = cluster();
    let leader = c.elect();
    grant(&mut c, leader, THRESHOLD as usize);
    let image_index = {
        let images = &c.images[&leader];
        assert_eq!(
            images.len(),
            1,
            "one snapshot handed out, no other while it is taken"
        );
        images[0].index()
    };
    // Session ids are their grants' indices, and none ends here.
    let sessions_at_image = c
        .node(leader)
        .state_machine()
        .sessions()
        .filter(|(id, _)| *id <= image_index)
        .count();
    let sessions_now = c.node(leader).state_machine().session_count();
    // The node goes on: more entries are applied, past another snapshot point, and no second
    // snapshot is handed out while the first is under way.
    grant(&mut c, leader, 2 * THRESHOLD as usize);
    assert_eq!(c.images[&leader].len(), 1);
    assert_eq!(
        c.node(leader).snapshot_meta(),
        (0, 0),
        "nothing compacted before the snapshot is taken"
    );
    assert!(c
        .node(leader)
        .log_entries()
        .first()
        .is_some_and(|e| e.index == 1));
    let live = c.node(leader).state_machine().session_count();
    assert_eq!(live, sessions_now + 2 * THRESHOLD as usize);

    // The image encodes the state as it was at its index, not as it is now.
    let encoded = c.images[&leader][0].encode();
    let restored =
        StateMachine::restore(Default::default(), &encoded.data).expect("the image decodes");
    assert_eq!(restored.applied_index(), image_index);
    assert_eq!(restored.session_count(), sessions_at_image);

    // Taken: the log is compacted up to it, and the next snapshot point hands out another.
    assert_eq!(c.take_snapshots(leader), [true]);
    let (index, term) = c.node(leader).snapshot_meta();
    assert_eq!(index, image_index);
    assert!(term > 0);
    assert!(c
        .node(leader)
        .log_entries()
        .first()
        .is_some_and(|e| e.index == image_index + 1));
    grant(&mut c, leader, THRESHOLD as usize);
    assert_eq!(
        c.images[&leader].len(),
        1,
        "the next snapshot is handed out"
    );

    // A restart before that one is taken finds the older snapshot and every later entry.
    let digest = c.node(leader).state_machine().digest();
    c.restart(leader);
    assert_eq!(c.node(leader).snapshot_meta().0, image_index);
    assert_eq!(c.node(leader).state_machine().digest(), digest);
}

#[test]
fn a_snapshot_taken_after_a_leaders_snapshot_was_installed_is_dropped() {
    let mut c = cluster();
    let leader = c.elect();
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    grant(&mut c, leader, THRESHOLD as usize);
    // The follower's own snapshot is under way while it is cut off...
    assert_eq!(c.images[&follower].len(), 1);
    let pending = c.images[&follower][0].index();
    c.isolate(follower);
    // ...and the others go on and compact well past it.
    grant(&mut c, leader, 3 * THRESHOLD as usize);
    let third = (1..=3).find(|id| *id != leader && *id != follower).unwrap();
    c.take_snapshots(leader);
    c.take_snapshots(third);
    grant(&mut c, leader, 2 * THRESHOLD as usize);
    c.take_snapshots(leader);
    c.take_snapshots(third);
    let leader_snapshot = c.node(leader).snapshot_meta();
    assert!(leader_snapshot.0 > pending);
    // Back in touch, the follower is sent the leader's snapshot and installs it.
    c.heal();
    for _ in 0..50 {
        c.tick();
        if c.node(follower).snapshot_meta() == leader_snapshot {
            break;
        }
    }
    assert_eq!(c.node(follower).snapshot_meta(), leader_snapshot);
    // Its own, older snapshot finishes only now: the disk and the node both drop it.
    assert_eq!(c.take_snapshots(follower), [false]);
    assert_eq!(c.node(follower).snapshot_meta(), leader_snapshot);
    assert_eq!(
        c.disks[&follower]
            .recovered
            .snapshot
            .as_ref()
            .map(|s| s.index),
        Some(leader_snapshot.0)
    );
    c.deliver_all();
    assert_eq!(
        c.node(follower).state_machine().digest(),
        c.node(leader).state_machine().digest()
    );
}
