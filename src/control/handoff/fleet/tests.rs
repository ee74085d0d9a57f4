//! Following other replicas' moves: the pause and hold this replica owes them.

use std::time::Duration;

use super::*;
use crate::config::Config;
use crate::directory::MemoryDirectory;
use crate::metrics::Metrics;
use crate::snapshot::{Publisher, Snapshot};

/// Bounds every wait for something that must happen.
const SOON: Duration = Duration::from_secs(5);

fn gateway() -> Arc<Gateway> {
    let text = "[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\n[[backends]]\nid = \"b\"\naddr = \"127.0.0.1:2\"\n\
                [[routes]]\nprefix = \"/\"\nmode = \"room\"\nkeys = [\"query:room\"]\n";
    let config = Config::from_toml(text, "t").unwrap();
    let publisher = Publisher::new(Snapshot::build(config, 1));
    Gateway::new(publisher.current().clone(), Arc::new(MemoryDirectory::new()), Metrics::new())
}

async fn until(what: &str, cond: impl Fn() -> bool) {
    let waited = tokio::time::timeout(SOON, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    waited.await.unwrap_or_else(|_| panic!("{what}"));
}

/// Lets every task that is ready run to its next wait (the test runtime has one thread).
async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// Found by the 30-minute soak: both replicas acted on one shared drain deadline, and this one
/// began its own move of a room the other had just leased. The other's begin found the room
/// held here and was skipped: never paused, never acknowledged, so the move failed its pause step
/// and the room restarted empty. Now the pause waits for the local hold (which gives up once
/// Redis refuses it the lease) and then follows the move.
#[tokio::test]
async fn a_move_that_begins_while_the_room_is_held_here_is_followed_once_the_hold_ends() {
    let gateway = gateway();
    let tunnel = gateway.tunnels().register(Some("r".into()), "a".into());
    let own_attempt = gateway.moving().begin("r").unwrap();
    let (events, rx) = mpsc::channel(8);
    tokio::spawn(FleetPauses { gateway: gateway.clone(), events: rx }.run());
    let lease = Duration::from_secs(30);
    events.send(FleetMove::Begin { room: "r".into(), from: "a".into(), lease }).await.unwrap();
    settle().await;
    assert!(!tunnel.handle().is_paused(), "held by this replica's own attempt for now");

    drop(own_attempt); // Redis refused it the lease
    until("the other replica's move is followed", || tunnel.handle().is_paused()).await;
    assert!(gateway.moving().begin("r").is_none(), "the room's joins are held for it");

    events.send(FleetMove::End { room: "r".into(), from: "a".into(), moved: false }).await.unwrap();
    until("the pause ends with the move", || !tunnel.handle().is_paused()).await;
    until("and the hold", || gateway.moving().is_empty()).await;
}

/// A begin whose end never comes is followed until its lease, no longer; one that ends before
/// the local hold does is not followed at all.
#[tokio::test]
async fn a_followed_move_ends_at_its_lease_and_one_ended_while_waiting_is_dropped() {
    let gateway = gateway();
    let tunnel = gateway.tunnels().register(Some("r".into()), "a".into());
    let (events, rx) = mpsc::channel(8);
    tokio::spawn(FleetPauses { gateway: gateway.clone(), events: rx }.run());
    let lease = Duration::from_millis(200);
    events.send(FleetMove::Begin { room: "r".into(), from: "a".into(), lease }).await.unwrap();
    until("paused", || tunnel.handle().is_paused()).await;
    until("the lease ends the pause", || !tunnel.handle().is_paused() && gateway.moving().is_empty()).await;

    let own_attempt = gateway.moving().begin("r").unwrap();
    events.send(FleetMove::Begin { room: "r".into(), from: "a".into(), lease: SOON * 2 }).await.unwrap();
    events.send(FleetMove::End { room: "r".into(), from: "a".into(), moved: false }).await.unwrap();
    settle().await; // the loop hands the end on, the waiting pause takes it
    drop(own_attempt);
    settle().await;
    assert!(!tunnel.handle().is_paused(), "a move that ended before it could be followed");
    assert!(gateway.moving().is_empty());
}
