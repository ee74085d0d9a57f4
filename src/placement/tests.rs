use super::*;

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("game-{i}")).collect()
}

fn owner_ids(p: &Placement, ids: &[String], keys: &[String]) -> Vec<String> {
    keys.iter().map(|k| ids[p.place(k.as_bytes()).unwrap()].clone()).collect()
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("room-{i}")).collect()
}

const ALGOS: [Algorithm; 2] = [Algorithm::Rendezvous, Algorithm::Ring];

/// Guards determinism across builds, platforms and releases: if this changes, every deployed
/// replica would disagree with a new one about where rooms live.
#[test]
fn golden_owners() {
    let ids = ids(5);
    let keys: Vec<String> = ["lobby", "42", "room-1", "chess/alpha", "a", "Z9", "x".repeat(128).as_str()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let rendezvous = owner_ids(&Placement::build(Algorithm::Rendezvous, 160, &ids), &ids, &keys);
    let ring = owner_ids(&Placement::build(Algorithm::Ring, 160, &ids), &ids, &keys);
    assert_eq!(rendezvous, GOLDEN_RENDEZVOUS, "rendezvous owners changed");
    assert_eq!(ring, GOLDEN_RING, "ring owners changed");
}

const GOLDEN_RENDEZVOUS: [&str; 7] = ["game-2", "game-1", "game-4", "game-4", "game-2", "game-0", "game-1"];
const GOLDEN_RING: [&str; 7] = ["game-2", "game-1", "game-4", "game-4", "game-0", "game-4", "game-4"];

#[test]
fn order_of_ids_does_not_matter() {
    let forward = ids(16);
    let mut shuffled = forward.clone();
    shuffled.reverse();
    shuffled.swap(3, 11);
    let keys = keys(5_000);
    for algo in ALGOS {
        let a = owner_ids(&Placement::build(algo, 160, &forward), &forward, &keys);
        let b = owner_ids(&Placement::build(algo, 160, &shuffled), &shuffled, &keys);
        assert_eq!(a, b, "{algo}");
    }
}

#[test]
fn adding_a_backend_moves_rooms_only_to_it() {
    let keys = keys(20_000);
    for algo in ALGOS {
        let before_ids = ids(8);
        let after_ids = ids(9);
        let before = owner_ids(&Placement::build(algo, 160, &before_ids), &before_ids, &keys);
        let after = owner_ids(&Placement::build(algo, 160, &after_ids), &after_ids, &keys);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                assert_eq!(a, "game-8", "{algo}: a room moved between two backends that both stayed");
                moved += 1;
            }
        }
        let share = moved as f64 / keys.len() as f64;
        assert!((0.07..0.16).contains(&share), "{algo}: moved {share}, ideal 1/9");
    }
}

#[test]
fn removing_a_backend_moves_only_its_rooms() {
    let keys = keys(20_000);
    for algo in ALGOS {
        let before_ids = ids(8);
        let after_ids: Vec<String> = before_ids.iter().filter(|id| *id != "game-3").cloned().collect();
        let before = owner_ids(&Placement::build(algo, 160, &before_ids), &before_ids, &keys);
        let after = owner_ids(&Placement::build(algo, 160, &after_ids), &after_ids, &keys);
        for (b, a) in before.iter().zip(&after) {
            if b != "game-3" {
                assert_eq!(a, b, "{algo}: a room of a remaining backend moved");
            }
        }
    }
}

fn max_over_mean(algo: Algorithm, backends: usize, n_keys: usize) -> f64 {
    let ids = ids(backends);
    let p = Placement::build(algo, 160, &ids);
    let mut counts = vec![0usize; backends];
    for k in keys(n_keys) {
        counts[p.place(k.as_bytes()).unwrap()] += 1;
    }
    let mean = n_keys as f64 / backends as f64;
    *counts.iter().max().unwrap() as f64 / mean
}

#[test]
fn balance_on_100k_keys() {
    let r = max_over_mean(Algorithm::Rendezvous, 16, 100_000);
    let g = max_over_mean(Algorithm::Ring, 16, 100_000);
    eprintln!("max/mean at 16 backends, 100k keys: rendezvous {r:.3}, ring {g:.3}");
    assert!(r < 1.05, "rendezvous max/mean {r}");
    assert!(g < 1.30, "ring max/mean {g}");
}

#[test]
fn eligible_fallback_is_deterministic_and_spreads() {
    let ids = ids(6);
    let keys = keys(6_000);
    for algo in ALGOS {
        let p = Placement::build(algo, 160, &ids);
        let mut landed = vec![0usize; 6];
        for k in &keys {
            let owner = p.place(k.as_bytes()).unwrap();
            let fallback = p.place_eligible(k.as_bytes(), |i| i != 2).unwrap();
            assert_ne!(fallback, 2);
            if owner != 2 {
                assert_eq!(fallback, owner, "{algo}: eligible owner must not change");
            } else {
                landed[fallback] += 1;
            }
        }
        let moved: usize = landed.iter().sum();
        for (i, &n) in landed.iter().enumerate() {
            if i != 2 {
                assert!(n > moved / 10, "{algo}: fallback piles up: {landed:?}");
            }
        }
        assert_eq!(p.place_eligible(b"k", |_| false), None);
        assert_eq!(p.place_eligible(b"k", |i| i == 4), Some(4));
    }
}

#[test]
fn empty_set_places_nothing() {
    let none: Vec<String> = Vec::new();
    for algo in ALGOS {
        assert_eq!(Placement::build(algo, 160, &none).place(b"k"), None);
    }
}
