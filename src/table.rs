//! Hash tables that give their memory back after a burst.

use std::collections::HashMap;

/// Gives a table's memory back once it holds a quarter of what it has room for: after a burst of
/// rooms or sockets closes, the table would otherwise keep its peak size for good.
pub fn shrink<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}
