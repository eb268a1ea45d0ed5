//! Hash maps of the per-record path, keyed by bytes that callers choose (request ids, thread
//! ids, index keys): foldhash instead of the standard library's SipHash, seeded from the
//! operating system's randomness.
//!
//! SipHash was about a twentieth of `verify`'s CPU (a batch's view, the rule replay, the runs'
//! Bloom filters), docs/performance.md. foldhash is several times cheaper per key, and it is
//! only "minimally" resistant to collision attacks when seeded as its crate does by default
//! (from addresses and the clock): so every map here takes its seeds from the standard
//! library's [`std::hash::RandomState`], which the operating system seeds. The seed shared by
//! all maps is drawn once per process; each map draws its own per-map seed as well, so a
//! batch's view (a fresh map per batch) hashes differently from the batch before it.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::LazyLock;

use foldhash::SharedSeed;
use foldhash::fast::{FoldHasher, SeedableRandomState};

/// 64 bits the operating system seeded: SipHash of nothing under a fresh [`RandomState`]
/// (whose keys come from the OS once per thread, and change for every state made).
fn os_seeded_u64() -> u64 {
    RandomState::new().hash_one(())
}

/// The seed every map of the process shares, drawn once.
static SHARED: LazyLock<SharedSeed> = LazyLock::new(|| SharedSeed::from_u64(os_seeded_u64()));

/// A map's hasher builder: foldhash with the process's shared seed and a per-map seed, both
/// from the OS ([`Default`] draws the per-map seed).
#[derive(Clone, Debug)]
pub struct Seeded(SeedableRandomState);

impl Default for Seeded {
    fn default() -> Seeded {
        Seeded(SeedableRandomState::with_seed(os_seeded_u64(), &SHARED))
    }
}

impl BuildHasher for Seeded {
    type Hasher = FoldHasher<'static>;

    fn build_hasher(&self) -> FoldHasher<'static> {
        self.0.build_hasher()
    }
}

/// A hash map with a [`Seeded`] hasher.
pub type Map<K, V> = HashMap<K, V, Seeded>;

/// An empty [`Map`] with room for `n` entries.
pub fn map_with_capacity<K, V>(n: usize) -> Map<K, V> {
    HashMap::with_capacity_and_hasher(n, Seeded::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_maps_hash_the_same_key_apart_and_one_map_hashes_it_alike() {
        // The per-map seed differs between maps (so a batch's view does not hash as the
        // batch before it did), and one map's hasher is a function of the key alone.
        let (a, b) = (Seeded::default(), Seeded::default());
        let key = b"request-1".as_slice();
        assert_eq!(a.hash_one(key), a.hash_one(key));
        assert_ne!(a.hash_one(key), b.hash_one(key));
        let mut m: Map<Vec<u8>, u32> = map_with_capacity(4);
        m.insert(key.to_vec(), 1);
        assert_eq!(m.get(key), Some(&1));
    }

    #[test]
    fn seeds_come_from_fresh_states() {
        // Two draws are not equal: a seed that did not change would be a fixed key.
        assert_ne!(os_seeded_u64(), os_seeded_u64());
    }
}
