//! The Merkle tree's stored nodes as tiles, in the layout of C2SP `tlog-tiles`: the tile of
//! level `L` and index `N` holds the hashes of the tree's level-`8L` nodes `256·N` to
//! `256·N + 255` (level 0: the leaf hashes), concatenated, 32 bytes each, left to right. A full
//! tile holds [`TILE_WIDTH`] hashes; the last tile of each level holds fewer (its width) and
//! grows as the log does, so the tiles of a tree of `n` leaves are exactly the ones `tlog-tiles`
//! serves for `n`, the partial ones at their partial width.
//!
//! Every perfect subtree of the tree lies inside one tile: node `(8L + k, i)` (`k < 8`) is the
//! subtree over the `2^k` hashes of tile `(L, ⌊i·2^k / 256⌋)` from offset `i·2^k mod 256`
//! ([`place`]), so [`TileNodes`] answers [`NodeSource::node`] by folding them (a tile's interior
//! is computed once per reader and kept while the reader lives) and [`super::merkle::root`] and
//! the proof functions work unchanged on tiles.
//!
//! Appending a leaf changes one tile per level it completes ([`append_leaf`]): the
//! level-0 tile gets the leaf hash, and when a tile becomes full its root (a level-`8(L+1)`
//! node) is appended to the tile above. A batch of appends therefore rewrites a few tiles
//! instead of writing about two nodes per record.
//!
//! Pure: tiles are read through a [`TileSource`]; nothing here does I/O.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use super::merkle::{Hash, NodeSource, node_hash};

/// Tree levels one tile spans.
pub const TILE_HEIGHT: u32 = 8;

/// Hashes in a full tile.
pub const TILE_WIDTH: usize = 1 << TILE_HEIGHT;

/// Bytes of one hash in a tile.
const HASH_LEN: usize = 32;

/// Tiles a [`TileNodes`] keeps computed (it starts over past this, so memory is bounded).
const CACHED_TILES: usize = 64;

/// Where the tree node `(level, index)` lies: in tile `(tile_level, tile_index)`, spanning the
/// `span` hashes from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The tile's level (the node's level divided by [`TILE_HEIGHT`]).
    pub tile_level: u32,
    /// The tile's index within its level.
    pub tile_index: u64,
    /// The first of the node's hashes in the tile.
    pub offset: usize,
    /// How many of the tile's hashes the node spans: `2^(level mod 8)`.
    pub span: usize,
}

/// The place of tree node `(level, index)`; `None` when the node's first leaf is beyond
/// `u64` (no tree of `u64` leaves has it).
#[must_use]
pub fn place(level: u32, index: u64) -> Option<Place> {
    let k = level % TILE_HEIGHT;
    if level >= u64::BITS || (level > 0 && index >> (u64::BITS - level) != 0) {
        return None;
    }
    let first = index << k;
    Some(Place {
        tile_level: level / TILE_HEIGHT,
        tile_index: first >> TILE_HEIGHT,
        offset: (first % TILE_WIDTH as u64) as usize,
        span: 1 << k,
    })
}

/// Read access to stored tiles.
pub trait TileSource {
    /// The error of a failed read.
    type Error;

    /// The stored bytes of tile `(level, index)`, `None` when there is none.
    ///
    /// # Errors
    /// Whatever the storage reports; passed through as [`TileError::Source`].
    fn tile(&self, level: u32, index: u64) -> Result<Option<Vec<u8>>, Self::Error>;
}

impl<T: TileSource + ?Sized> TileSource for &T {
    type Error = T::Error;
    fn tile(&self, level: u32, index: u64) -> Result<Option<Vec<u8>>, Self::Error> {
        (**self).tile(level, index)
    }
}

/// Why a node could not be read from tiles, or a tile not extended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TileError<E> {
    /// The source failed.
    Source(E),
    /// The tile is not stored.
    Missing {
        /// Tile level.
        level: u32,
        /// Tile index.
        index: u64,
    },
    /// The tile's bytes are not whole hashes, or more than [`TILE_WIDTH`] of them.
    Malformed {
        /// Tile level.
        level: u32,
        /// Tile index.
        index: u64,
        /// Its length in bytes.
        len: usize,
    },
    /// The tile holds another number of hashes than the tree needs here.
    Width {
        /// Tile level.
        level: u32,
        /// Tile index.
        index: u64,
        /// Hashes it holds.
        width: usize,
        /// Hashes the tree needs it to hold (at least, for a read; exactly, for an append).
        needed: usize,
    },
    /// The node is beyond any tree of `u64` leaves.
    OutOfRange {
        /// Node level.
        level: u32,
        /// Node index.
        index: u64,
    },
}

impl<E: fmt::Display> fmt::Display for TileError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TileError::Source(e) => write!(f, "{e}"),
            TileError::Missing { level, index } => {
                write!(f, "tree tile level {level} index {index} is missing")
            }
            TileError::Malformed { level, index, len } => write!(
                f,
                "tree tile level {level} index {index} is {len} bytes, not at most {TILE_WIDTH} hashes of 32"
            ),
            TileError::Width {
                level,
                index,
                width,
                needed,
            } => write!(
                f,
                "tree tile level {level} index {index} holds {width} hashes where the tree needs {needed}"
            ),
            TileError::OutOfRange { level, index } => {
                write!(f, "tree node level {level} index {index} is beyond any log")
            }
        }
    }
}

/// The hashes of a tile's bytes, or why they are not a tile.
fn hashes<E>(level: u32, index: u64, bytes: &[u8]) -> Result<Vec<Hash>, TileError<E>> {
    if !bytes.len().is_multiple_of(HASH_LEN) || bytes.len() > TILE_WIDTH * HASH_LEN {
        return Err(TileError::Malformed {
            level,
            index,
            len: bytes.len(),
        });
    }
    Ok(bytes
        .chunks_exact(HASH_LEN)
        .map(|c| {
            let mut h = [0u8; 32];
            h.copy_from_slice(c);
            h
        })
        .collect())
}

/// The root of the perfect subtree over `hashes` (a power-of-two count, at least one).
fn perfect_root(hashes: &[Hash]) -> Hash {
    debug_assert!(hashes.len().is_power_of_two());
    let mut level = hashes.to_vec();
    while level.len() > 1 {
        level = level
            .chunks_exact(2)
            .map(|pair| node_hash(&pair[0], &pair[1]))
            .collect();
    }
    level.first().copied().unwrap_or([0; 32])
}

/// Where appends write tiles: in place, one hash at a time.
pub trait TileAppend {
    /// The error of a failed read or write.
    type Error;

    /// Appends `hash` to tile `(level, index)` (an absent tile is empty) and returns the
    /// tile's bytes after it.
    ///
    /// # Errors
    /// Whatever the storage reports; passed through as [`TileError::Source`].
    fn append(&mut self, level: u32, index: u64, hash: &Hash) -> Result<&[u8], Self::Error>;
}

/// Appends `leaf_hash` as leaf number `size_before` to the tiles: the level-0 tile gets it, and
/// each tile that thereby becomes full has its root appended to the tile above (one more tile
/// per level completed). Each tile written must have held exactly the hashes before this one
/// (none for a tile this append starts).
///
/// # Errors
/// The writer's errors; [`TileError::Malformed`] or [`TileError::Width`] when a stored tile is
/// not the one the tree of `size_before` leaves has (the writer's changes are then the caller's
/// to roll back).
pub fn append_leaf<W: TileAppend>(
    w: &mut W,
    size_before: u64,
    leaf_hash: &Hash,
) -> Result<(), TileError<W::Error>> {
    let mut position = size_before;
    let mut hash = *leaf_hash;
    let mut level = 0u32;
    loop {
        let index = position >> TILE_HEIGHT;
        let before = (position % TILE_WIDTH as u64) as usize;
        let after = w.append(level, index, &hash).map_err(TileError::Source)?;
        let len = after.len() - HASH_LEN;
        if !len.is_multiple_of(HASH_LEN) || len >= TILE_WIDTH * HASH_LEN {
            return Err(TileError::Malformed { level, index, len });
        }
        if len != before * HASH_LEN {
            return Err(TileError::Width {
                level,
                index,
                width: len / HASH_LEN,
                needed: before,
            });
        }
        if before + 1 < TILE_WIDTH {
            return Ok(());
        }
        hash = perfect_root(&hashes::<W::Error>(level, index, after)?);
        position = index;
        level += 1;
    }
}

/// A tile's hashes and the interior levels computed from them so far: `levels[k]` holds the
/// tile's complete height-`k` subtrees, left to right.
#[derive(Debug)]
struct Computed {
    levels: RefCell<Vec<Vec<Hash>>>,
}

impl Computed {
    /// The complete height-`k` subtree at `at` (counted in height-`k` subtrees), computing the
    /// levels up to `k` once.
    fn node(&self, k: usize, at: usize) -> Option<Hash> {
        let mut levels = self.levels.borrow_mut();
        while levels.len() <= k {
            let next: Vec<Hash> = levels
                .last()?
                .chunks_exact(2)
                .map(|pair| node_hash(&pair[0], &pair[1]))
                .collect();
            levels.push(next);
        }
        levels.get(k)?.get(at).copied()
    }

    fn width(&self) -> usize {
        self.levels.borrow().first().map_or(0, Vec::len)
    }
}

/// Tree nodes answered from tiles ([`NodeSource`]), each tile read and its interior computed
/// at most once while the reader lives (up to [`CACHED_TILES`] tiles at once).
pub struct TileNodes<S> {
    src: S,
    cache: RefCell<HashMap<(u32, u64), Rc<Computed>>>,
}

impl<S: TileSource> TileNodes<S> {
    /// A reader over `src`.
    pub fn new(src: S) -> TileNodes<S> {
        TileNodes {
            src,
            cache: RefCell::new(HashMap::new()),
        }
    }

    fn computed(&self, level: u32, index: u64) -> Result<Rc<Computed>, TileError<S::Error>> {
        if let Some(c) = self.cache.borrow().get(&(level, index)) {
            return Ok(Rc::clone(c));
        }
        let bytes = self
            .src
            .tile(level, index)
            .map_err(TileError::Source)?
            .ok_or(TileError::Missing { level, index })?;
        let computed = Rc::new(Computed {
            levels: RefCell::new(vec![hashes(level, index, &bytes)?]),
        });
        let mut cache = self.cache.borrow_mut();
        if cache.len() >= CACHED_TILES {
            cache.clear();
        }
        cache.insert((level, index), Rc::clone(&computed));
        Ok(computed)
    }
}

impl<S: TileSource> NodeSource for TileNodes<S> {
    type Error = TileError<S::Error>;

    fn node(&self, level: u32, index: u64) -> Result<Hash, Self::Error> {
        let p = place(level, index).ok_or(TileError::OutOfRange { level, index })?;
        let tile = self.computed(p.tile_level, p.tile_index)?;
        let k = (level % TILE_HEIGHT) as usize;
        tile.node(k, p.offset >> k).ok_or_else(|| TileError::Width {
            level: p.tile_level,
            index: p.tile_index,
            width: tile.width(),
            needed: p.offset + p.span,
        })
    }
}

#[cfg(test)]
mod tests {
    //! The tiles against [`MemoryTree`], which stores every node one by one (the layout the
    //! tiles replaced, kept as the oracle): the same nodes, roots and proofs at every size.

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::format::merkle::{self, MemoryTree, leaf_hash};

    /// Tiles in a map, the way the `nodes` keyspace holds them.
    #[derive(Default, Clone)]
    struct Map(BTreeMap<(u32, u64), Vec<u8>>);

    impl TileSource for Map {
        type Error = std::convert::Infallible;
        fn tile(&self, level: u32, index: u64) -> Result<Option<Vec<u8>>, Self::Error> {
            Ok(self.0.get(&(level, index)).cloned())
        }
    }

    impl TileAppend for Map {
        type Error = std::convert::Infallible;
        fn append(&mut self, level: u32, index: u64, hash: &Hash) -> Result<&[u8], Self::Error> {
            let t = self.0.entry((level, index)).or_default();
            t.extend_from_slice(hash);
            Ok(t)
        }
    }

    fn leaf(i: u64) -> Hash {
        leaf_hash(&i.to_be_bytes())
    }

    /// Both stores after `n` appends, the tiles written as an appender writes them.
    fn grown(n: u64) -> (Map, MemoryTree) {
        let mut tiles = Map::default();
        let mut tree = MemoryTree::new();
        for i in 0..n {
            let h = leaf(i);
            append_leaf(&mut tiles, i, &h).unwrap();
            tree.push(&h);
        }
        (tiles, tree)
    }

    /// A tree past the second level's first full tile (65,536 leaves), built once.
    fn big() -> &'static (Map, MemoryTree) {
        static BIG: std::sync::OnceLock<(Map, MemoryTree)> = std::sync::OnceLock::new();
        BIG.get_or_init(|| grown(65_536 + 3 * 256 + 17))
    }

    #[test]
    fn places_follow_the_tlog_tiles_layout() {
        let p = |l, i| place(l, i).unwrap();
        assert_eq!(
            p(0, 0),
            Place {
                tile_level: 0,
                tile_index: 0,
                offset: 0,
                span: 1
            }
        );
        assert_eq!(
            p(0, 257),
            Place {
                tile_level: 0,
                tile_index: 1,
                offset: 1,
                span: 1
            }
        );
        assert_eq!(
            p(3, 33),
            Place {
                tile_level: 0,
                tile_index: 1,
                offset: 8,
                span: 8
            }
        );
        assert_eq!(
            p(8, 5),
            Place {
                tile_level: 1,
                tile_index: 0,
                offset: 5,
                span: 1
            }
        );
        assert_eq!(
            p(15, 3),
            Place {
                tile_level: 1,
                tile_index: 1,
                offset: 128,
                span: 128
            }
        );
        assert_eq!(
            p(16, 0),
            Place {
                tile_level: 2,
                tile_index: 0,
                offset: 0,
                span: 1
            }
        );
        assert_eq!(
            place(63, 1),
            Some(Place {
                tile_level: 7,
                tile_index: 0,
                offset: 128,
                span: 128
            })
        );
        assert_eq!(
            place(56, 255),
            Some(Place {
                tile_level: 7,
                tile_index: 0,
                offset: 255,
                span: 1
            })
        );
        assert_eq!(place(56, 256), None);
        assert_eq!(place(63, 2), None);
        assert_eq!(place(64, 0), None);
    }

    #[test]
    fn every_node_of_a_tree_is_the_one_stored_node_by_node() {
        let (tiles, tree) = big();
        let nodes = TileNodes::new(tiles);
        let n = tree.len();
        for level in 0..18u32 {
            let count = n >> level;
            for index in 0..count {
                assert_eq!(
                    nodes.node(level, index).unwrap(),
                    tree.node(level, index).unwrap(),
                    "node ({level}, {index})"
                );
            }
            // The first node the tree does not have yet is refused, never answered.
            if count % 256 != 0 || level % 8 != 0 {
                assert!(nodes.node(level, count).is_err(), "node ({level}, {count})");
            }
        }
    }

    #[test]
    fn the_tiles_of_a_tree_are_whole_for_every_full_tile_and_partial_at_the_right_edge() {
        let (tiles, tree) = big();
        let n = tree.len();
        let mut expected = BTreeMap::new();
        let mut width = n;
        for level in 0..3u32 {
            for index in 0..width.div_ceil(256) {
                let w = (width - index * 256).min(256) as usize;
                expected.insert((level, index), w * 32);
            }
            width /= 256;
        }
        let found: BTreeMap<_, _> = tiles.0.iter().map(|(k, v)| (*k, v.len())).collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn an_append_onto_a_tile_that_is_not_the_trees_is_refused() {
        let refused = |mut tiles: Map, n: u64| append_leaf(&mut tiles, n, &leaf(n)).unwrap_err();
        let (tiles, _) = grown(300);
        // Leaf 300 goes at offset 44 of tile (0, 1).
        let mut short = tiles.clone();
        short.0.get_mut(&(0, 1)).unwrap().truncate(43 * 32);
        assert_eq!(
            refused(short, 300),
            TileError::Width {
                level: 0,
                index: 1,
                width: 43,
                needed: 44
            }
        );
        let mut torn = tiles.clone();
        torn.0.get_mut(&(0, 1)).unwrap().push(7);
        assert_eq!(
            refused(torn, 300),
            TileError::Malformed {
                level: 0,
                index: 1,
                len: 44 * 32 + 1
            }
        );
        let mut missing = tiles.clone();
        missing.0.remove(&(0, 1));
        assert_eq!(
            refused(missing, 300),
            TileError::Width {
                level: 0,
                index: 1,
                width: 0,
                needed: 44
            }
        );
        // A tile the append would start must not hold anything yet.
        let (mut early, _) = grown(256);
        early.0.insert((0, 1), leaf(0).to_vec());
        assert_eq!(
            refused(early, 256),
            TileError::Width {
                level: 0,
                index: 1,
                width: 1,
                needed: 0
            }
        );
        // Nor may a full tile be appended to.
        let (mut full, _) = grown(255);
        let extra = full.0.get(&(0, 0)).unwrap()[..32].to_vec();
        full.0.get_mut(&(0, 0)).unwrap().extend_from_slice(&extra);
        assert_eq!(
            refused(full, 255),
            TileError::Malformed {
                level: 0,
                index: 0,
                len: 256 * 32
            }
        );
        // The tile above gets the root of a tile that became full, checked the same way.
        let (mut above, _) = grown(511);
        above.0.insert((1, 0), vec![]);
        assert_eq!(
            refused(above, 511),
            TileError::Width {
                level: 1,
                index: 0,
                width: 0,
                needed: 1
            }
        );
    }

    #[test]
    fn a_tile_that_is_too_long_or_not_whole_hashes_is_not_read() {
        let (mut tiles, _) = grown(10);
        tiles.0.insert((0, 0), vec![0; 31]);
        assert!(matches!(
            TileNodes::new(&tiles).node(0, 0),
            Err(TileError::Malformed { len: 31, .. })
        ));
        tiles.0.insert((0, 0), vec![0; 257 * 32]);
        assert!(matches!(
            TileNodes::new(&tiles).node(0, 0),
            Err(TileError::Malformed { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// At every size the tiles as they were then give the oracle's root and proofs.
        #[test]
        fn roots_and_proofs_from_tiles_are_the_oracles(n in 1u64..1_400, m in 0u64..1_400, i in 0u64..1_400) {
            let m = m % (n + 1);
            let i = i % n;
            let (tiles, tree) = grown(n);
            let nodes = TileNodes::new(&tiles);
            prop_assert_eq!(merkle::root(&nodes, n).unwrap(), merkle::root(&tree, n).unwrap());
            prop_assert_eq!(merkle::root(&nodes, m).unwrap(), merkle::root(&tree, m).unwrap());
            prop_assert_eq!(
                merkle::inclusion_proof(&nodes, i, n).unwrap(),
                merkle::inclusion_proof(&tree, i, n).unwrap()
            );
            prop_assert_eq!(
                merkle::consistency_proof(&nodes, m, n).unwrap(),
                merkle::consistency_proof(&tree, m, n).unwrap()
            );
        }

        /// The same on the big tree, whose top nodes come from the second and third levels.
        #[test]
        fn proofs_across_tile_levels_are_the_oracles(n in 1u64..66_321, m in 0u64..66_321, i in 0u64..66_321) {
            let (tiles, tree) = big();
            let n = n.min(tree.len());
            let m = m % (n + 1);
            let i = i % n;
            let nodes = TileNodes::new(tiles);
            prop_assert_eq!(merkle::root(&nodes, n).unwrap(), merkle::root(tree, n).unwrap());
            prop_assert_eq!(
                merkle::inclusion_proof(&nodes, i, n).unwrap(),
                merkle::inclusion_proof(tree, i, n).unwrap()
            );
            prop_assert_eq!(
                merkle::consistency_proof(&nodes, m, n).unwrap(),
                merkle::consistency_proof(tree, m, n).unwrap()
            );
        }
    }
}
