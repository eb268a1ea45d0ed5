//! RFC 6962 / RFC 9162 Merkle trees over SHA-256 leaf hashes.
//!
//! This module holds the hashing rules of RFC 6962 §2.1 (identical in RFC 9162 §2.1.1), the
//! Merkle Tree Hash (MTH) of a log prefix, audit paths (RFC 6962 §2.1.1 `PATH`) and consistency
//! proofs (RFC 6962 §2.1.2 `PROOF`), and the verification algorithms of RFC 9162 §2.1.3.2 and
//! §2.1.4.2.
//!
//! # Node addressing
//!
//! `node(level, index)` is the hash of the *perfect* subtree covering the leaves
//! `[index·2^level, (index+1)·2^level)`; level 0 nodes are leaf hashes. A ledger stores exactly
//! these nodes (one per key), adding the ones returned by [`nodes_completed_by_append`] after each
//! append, and reads them through a [`NodeSource`]. Every other tree hash — the root of any
//! prefix, the right-edge subtrees of a tree whose size is not a power of two — is a fold of at
//! most 64 stored nodes, so [`root`], [`inclusion_proof`] and [`consistency_proof`] read
//! O(log n) nodes and never rehash the log.
//!
//! In the RFC's recursion, every subtree `D[s:s+n]` that occurs has `s` aligned to the smallest
//! power of two `≥ n`, so its hash is the right fold of the perfect subtrees given by the binary
//! digits of `n` (RFC 9162 §2.1.1: `k` is the largest power of two smaller than `n`).
//!
//! Verification is pure and compares hashes in constant time ([`hashes_equal`]).

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A SHA-256 digest: a leaf hash, an interior node hash or a tree root.
pub type Hash = [u8; 32];

/// Domain-separation prefix of leaf hashes (RFC 6962 §2.1).
const LEAF_PREFIX: u8 = 0x00;
/// Domain-separation prefix of interior node hashes (RFC 6962 §2.1).
const NODE_PREFIX: u8 = 0x01;

/// Hash of one log entry: `SHA-256(0x00 || leaf)` (RFC 6962 §2.1, `MTH({d(0)})`).
#[must_use]
pub fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([LEAF_PREFIX]);
    h.update(leaf);
    h.finalize().into()
}

/// Hash of an interior node: `SHA-256(0x01 || left || right)` (RFC 6962 §2.1).
#[must_use]
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([NODE_PREFIX]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// Root of the empty tree: `SHA-256("")` (RFC 6962 §2.1, `MTH({})`).
#[must_use]
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// Compares two hashes in constant time (no early exit on the first differing byte).
#[must_use]
pub fn hashes_equal(a: &Hash, b: &Hash) -> bool {
    a[..].ct_eq(&b[..]).into()
}

/// Read access to stored perfect-subtree nodes.
///
/// See the [module documentation](self) for the addressing scheme.
pub trait NodeSource {
    /// The error of a failed read (for example a storage error or a missing node).
    type Error;

    /// Hash of the perfect subtree at (level, index); only called for subtrees that are complete
    /// in the tree being read.
    ///
    /// # Errors
    ///
    /// Whatever the underlying storage reports; it is passed through unchanged (wrapped in
    /// [`ProofError::Source`] by the proof functions).
    fn node(&self, level: u32, index: u64) -> Result<Hash, Self::Error>;
}

/// Nodes completed by appending `leaf_hash` as leaf number `size_before` (0-based) to a tree of
/// `size_before` leaves: the level-0 node and every ancestor that becomes perfect, as
/// `(level, index, hash)`, in increasing level. Reads left siblings from `src`.
///
/// Leaf `i` completes one node per trailing one bit of `i` besides its own level-0 node, so the
/// function reads `i.trailing_ones()` nodes (fewer than one per append on average). Every node
/// read lies inside the first `size_before` leaves.
///
/// For `size_before == u64::MAX` the result ends with the level-64 node of index 0, whose tree
/// size (2^64) no `u64` can express; callers should refuse such an append before calling.
///
/// # Errors
///
/// Returns the error of `src` if reading a left sibling fails.
pub fn nodes_completed_by_append<S: NodeSource>(
    src: &S,
    size_before: u64,
    leaf_hash: &Hash,
) -> Result<Vec<(u32, u64, Hash)>, S::Error> {
    let i = size_before;
    let mut out = Vec::with_capacity(1 + i.trailing_ones() as usize);
    out.push((0, i, *leaf_hash));
    let mut cur = *leaf_hash;
    let mut level: u32 = 0;
    while level < u64::BITS {
        let index = shr(i, level);
        if index & 1 == 0 {
            break;
        }
        // `index` is odd, so the node is a right child and `index - 1` its left sibling.
        let left = src.node(level, index - 1)?;
        cur = node_hash(&left, &cur);
        level += 1;
        out.push((level, shr(i, level), cur));
    }
    Ok(out)
}

/// Root hash of the first `size` leaves (RFC 6962 §2.1 MTH); O(log size) node reads.
///
/// Reads `size.count_ones()` nodes (at most 64): one perfect subtree per binary digit of `size`.
/// `size == 0` gives [`empty_root`] without reading anything.
///
/// # Errors
///
/// [`ProofError::Source`] if a node read fails; no other variant is returned.
pub fn root<S: NodeSource>(src: &S, size: u64) -> Result<Hash, ProofError<S::Error>> {
    if size == 0 {
        return Ok(empty_root());
    }
    range_hash(src, 0, size)
}

/// Inclusion proof (audit path) of leaf `index` in the tree of the first `size` leaves:
/// RFC 6962 §2.1.1 `PATH(index, D[0:size])`, with O(log size) node reads.
///
/// The proof is ordered from the leaf's sibling up to the child of the root, as in the RFC. It is
/// built by walking from the root towards the leaf: each step's sibling is one stored node,
/// except where the walk first enters a perfect subtree on the left, whose right sibling is the
/// (possibly non-perfect) right-edge subtree; that one hash is folded from at most 64 stored
/// nodes, once. At most 127 reads in total.
///
/// # Errors
///
/// - [`ProofError::IndexOutOfRange`] if `index >= size` (including `size == 0`).
/// - [`ProofError::Source`] if a node read fails.
pub fn inclusion_proof<S: NodeSource>(
    src: &S,
    index: u64,
    size: u64,
) -> Result<Vec<Hash>, ProofError<S::Error>> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    // Invariant: the subtree is D[start:start+n], `start` aligned to the smallest power of two
    // >= n, and `m` is the leaf's index inside it.
    let (mut start, mut n, mut m) = (0u64, size, index);
    let mut top_down = Vec::with_capacity(path_len(index, size));
    while n > 1 {
        let k = split_point(n);
        if m < k {
            // PATH(m, D[0:k]) : MTH(D[k:n])
            top_down.push(range_hash(src, start + k, n - k)?);
            n = k;
        } else {
            // PATH(m - k, D[k:n]) : MTH(D[0:k]) — the left half is perfect.
            top_down.push(
                src.node(k.trailing_zeros(), start / k)
                    .map_err(ProofError::Source)?,
            );
            start += k;
            n -= k;
            m -= k;
        }
    }
    top_down.reverse();
    Ok(top_down)
}

/// Consistency proof from the tree of the first `m` leaves to the tree of the first `n` leaves:
/// RFC 6962 §2.1.2 `PROOF(m, D[0:n])`, with O(log n) node reads. Empty when `m == 0` or
/// `m == n`.
///
/// Implements `SUBPROOF(m, D[0:n], true)` iteratively from the root down. As in
/// [`inclusion_proof`], at most one hash in the proof is a non-perfect right-edge subtree
/// (folded once from at most 64 stored nodes); all others are single stored nodes. At most 127
/// reads in total.
///
/// # Errors
///
/// - [`ProofError::SizeOrder`] if `m > n`.
/// - [`ProofError::Source`] if a node read fails.
pub fn consistency_proof<S: NodeSource>(
    src: &S,
    m: u64,
    n: u64,
) -> Result<Vec<Hash>, ProofError<S::Error>> {
    if m > n {
        return Err(ProofError::SizeOrder { from: m, to: n });
    }
    if m == 0 || m == n {
        return Ok(Vec::new());
    }
    // Invariant: SUBPROOF(m, D[start:start+n], complete), `start` aligned to the smallest power
    // of two >= n, 1 <= m <= n.
    let (mut start, mut n, mut m, mut complete) = (0u64, n, m, true);
    let mut top_down = Vec::new();
    while m != n {
        let k = split_point(n);
        if m <= k {
            // SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
            top_down.push(range_hash(src, start + k, n - k)?);
            n = k;
        } else {
            // SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k]) — the left half is perfect.
            top_down.push(
                src.node(k.trailing_zeros(), start / k)
                    .map_err(ProofError::Source)?,
            );
            start += k;
            n -= k;
            m -= k;
            complete = false;
        }
    }
    if !complete {
        // SUBPROOF(m, D[m], false) = {MTH(D[m])}; this subtree is always perfect here.
        top_down.push(range_hash(src, start, n)?);
    }
    top_down.reverse();
    Ok(top_down)
}

/// Error of proof generation and root computation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProofError<E> {
    /// The leaf index is not inside the tree (`index >= size`).
    IndexOutOfRange {
        /// The requested leaf index.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// A consistency proof was asked from a larger tree to a smaller one.
    SizeOrder {
        /// The old (first) tree size.
        from: u64,
        /// The new (second) tree size.
        to: u64,
    },
    /// Reading a stored node failed.
    Source(E),
}

impl<E: fmt::Display> fmt::Display for ProofError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IndexOutOfRange { index, size } => {
                write!(f, "leaf index {index} is out of range for tree size {size}")
            }
            Self::SizeOrder { from, to } => write!(
                f,
                "consistency proof from tree size {from} to smaller tree size {to}"
            ),
            Self::Source(e) => write!(f, "reading a Merkle tree node failed: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ProofError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Source(e) => Some(e),
            _ => None,
        }
    }
}

/// Verifies an inclusion proof (RFC 9162 §2.1.3.2). Pure.
///
/// Checks that `proof` is an audit path showing that `leaf_hash` is leaf `index` of a tree of
/// `size` leaves whose root is `root`. The proof length is checked first (it is fixed by `index`
/// and `size`), then the root is recomputed and compared in constant time.
///
/// # Errors
///
/// - [`InclusionError::IndexOutOfRange`] if `index >= size` (including `size == 0`).
/// - [`InclusionError::WrongProofLength`] if `proof` does not have the length required by
///   `index` and `size`.
/// - [`InclusionError::RootMismatch`] if the recomputed root differs from `root`.
///
/// # Example
///
/// ```
/// use hitl_ledger::format::merkle::{MemoryTree, inclusion_proof, leaf_hash, root, verify_inclusion};
/// let mut tree = MemoryTree::new();
/// for leaf in [&b"a"[..], b"b", b"c"] {
///     tree.push(&leaf_hash(leaf));
/// }
/// let proof = inclusion_proof(&tree, 1, 3).unwrap();
/// let r = root(&tree, 3).unwrap();
/// assert!(verify_inclusion(&leaf_hash(b"b"), 1, 3, &proof, &r).is_ok());
/// assert!(verify_inclusion(&leaf_hash(b"x"), 1, 3, &proof, &r).is_err());
/// ```
pub fn verify_inclusion(
    leaf_hash: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), InclusionError> {
    if index >= size {
        return Err(InclusionError::IndexOutOfRange { index, size });
    }
    let (inner, border) = decompose_inclusion(index, size);
    let expected = inner + border;
    if proof.len() != expected {
        return Err(InclusionError::WrongProofLength {
            expected,
            found: proof.len(),
        });
    }
    let (inner_part, border_part) = proof.split_at(inner);
    let computed = chain_border_right(chain_inner(*leaf_hash, inner_part, index), border_part);
    if hashes_equal(&computed, root) {
        Ok(())
    } else {
        Err(InclusionError::RootMismatch {
            expected: *root,
            computed,
        })
    }
}

/// Verifies a consistency proof (RFC 9162 §2.1.4.2) from the tree of `m` leaves with root
/// `old_root` to the tree of `n` leaves with root `new_root`. Pure.
///
/// - `m == 0`: accepted iff `proof` is empty and `old_root == empty_root()` (every tree extends
///   the empty tree; RFC 9162 leaves this case open, transparency-dev/merkle rejects it).
/// - `m == n`: accepted iff `proof` is empty and the two roots are equal (both rules apply when
///   `m == n == 0`).
/// - `m > n`: rejected.
///
/// For `0 < m < n` the proof length is checked first (it is fixed by `m` and `n`), then both
/// roots are recomputed from the proof and compared in constant time. When `m` is a power of two
/// the proof omits the old root, which is then taken from `old_root` (RFC 9162 §2.1.4.2 step 2).
///
/// # Errors
///
/// - [`ConsistencyError::SizeOrder`] if `m > n`.
/// - [`ConsistencyError::NonEmptyProof`] if `m == 0` or `m == n` and `proof` is not empty.
/// - [`ConsistencyError::WrongProofLength`] if `0 < m < n` and `proof` does not have the length
///   required by `m` and `n`.
/// - [`ConsistencyError::OldRootMismatch`] if the old root recomputed from the proof (or the
///   empty root, for `m == 0`) differs from `old_root`.
/// - [`ConsistencyError::NewRootMismatch`] if the new root recomputed from the proof (or
///   `old_root`, for `m == n`) differs from `new_root`.
pub fn verify_consistency(
    m: u64,
    n: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ConsistencyError> {
    if m > n {
        return Err(ConsistencyError::SizeOrder { from: m, to: n });
    }
    if m == 0 || m == n {
        if !proof.is_empty() {
            return Err(ConsistencyError::NonEmptyProof);
        }
        if m == 0 {
            let empty = empty_root();
            if !hashes_equal(&empty, old_root) {
                return Err(ConsistencyError::OldRootMismatch {
                    expected: *old_root,
                    computed: empty,
                });
            }
        }
        if m == n && !hashes_equal(old_root, new_root) {
            return Err(ConsistencyError::NewRootMismatch {
                expected: *new_root,
                computed: *old_root,
            });
        }
        return Ok(());
    }

    // 0 < m < n. The proof is (a seed, unless m is a power of two) followed by a suffix of the
    // inclusion proof of leaf m-1 in the tree of size n, starting at level `shift`.
    let (inner, border) = decompose_inclusion(m - 1, n);
    let shift = m.trailing_zeros();
    // inner > shift whenever m < n; saturating_sub only guards the arithmetic.
    let inner = inner.saturating_sub(shift as usize);
    let m_is_power_of_two = m.is_power_of_two();
    let start = usize::from(!m_is_power_of_two);
    let expected = start + inner + border;
    if proof.len() != expected {
        return Err(ConsistencyError::WrongProofLength {
            expected,
            found: proof.len(),
        });
    }
    let (seed, rest) = match proof.split_first() {
        Some((first, rest)) if !m_is_power_of_two => (*first, rest),
        _ => (*old_root, proof),
    };
    let (inner_part, border_part) = rest.split_at(inner);
    let mask = (m - 1) >> shift;

    let old_computed = chain_border_right(chain_inner_right(seed, inner_part, mask), border_part);
    if !hashes_equal(&old_computed, old_root) {
        return Err(ConsistencyError::OldRootMismatch {
            expected: *old_root,
            computed: old_computed,
        });
    }
    let new_computed = chain_border_right(chain_inner(seed, inner_part, mask), border_part);
    if !hashes_equal(&new_computed, new_root) {
        return Err(ConsistencyError::NewRootMismatch {
            expected: *new_root,
            computed: new_computed,
        });
    }
    Ok(())
}

/// Why an inclusion proof was rejected by [`verify_inclusion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InclusionError {
    /// The leaf index is not inside the tree (`index >= size`).
    IndexOutOfRange {
        /// The claimed leaf index.
        index: u64,
        /// The claimed tree size.
        size: u64,
    },
    /// The proof does not have the length fixed by the index and the tree size.
    WrongProofLength {
        /// The required number of hashes.
        expected: usize,
        /// The number of hashes given.
        found: usize,
    },
    /// The root recomputed from the leaf hash and the proof is not the expected root.
    RootMismatch {
        /// The root the proof was checked against.
        expected: Hash,
        /// The root computed from the leaf hash and the proof.
        computed: Hash,
    },
}

impl fmt::Display for InclusionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IndexOutOfRange { index, size } => {
                write!(f, "leaf index {index} is out of range for tree size {size}")
            }
            Self::WrongProofLength { expected, found } => {
                write!(f, "inclusion proof has {found} hashes, expected {expected}")
            }
            Self::RootMismatch { expected, computed } => write!(
                f,
                "inclusion proof leads to root {}, expected {}",
                HexHash(computed),
                HexHash(expected)
            ),
        }
    }
}

impl std::error::Error for InclusionError {}

/// Why a consistency proof was rejected by [`verify_consistency`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsistencyError {
    /// The old tree size is larger than the new one.
    SizeOrder {
        /// The old (first) tree size.
        from: u64,
        /// The new (second) tree size.
        to: u64,
    },
    /// The proof does not have the length fixed by the two tree sizes.
    WrongProofLength {
        /// The required number of hashes.
        expected: usize,
        /// The number of hashes given.
        found: usize,
    },
    /// The old root recomputed from the proof is not the expected old root.
    OldRootMismatch {
        /// The old root the proof was checked against.
        expected: Hash,
        /// The old root computed from the proof.
        computed: Hash,
    },
    /// The new root recomputed from the proof is not the expected new root.
    NewRootMismatch {
        /// The new root the proof was checked against.
        expected: Hash,
        /// The new root computed from the proof.
        computed: Hash,
    },
    /// A proof was given where none is allowed (old size 0, or equal sizes).
    NonEmptyProof,
}

impl fmt::Display for ConsistencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SizeOrder { from, to } => write!(
                f,
                "consistency proof from tree size {from} to smaller tree size {to}"
            ),
            Self::WrongProofLength { expected, found } => write!(
                f,
                "consistency proof has {found} hashes, expected {expected}"
            ),
            Self::OldRootMismatch { expected, computed } => write!(
                f,
                "consistency proof leads to old root {}, expected {}",
                HexHash(computed),
                HexHash(expected)
            ),
            Self::NewRootMismatch { expected, computed } => write!(
                f,
                "consistency proof leads to new root {}, expected {}",
                HexHash(computed),
                HexHash(expected)
            ),
            Self::NonEmptyProof => write!(
                f,
                "consistency proof must be empty when the old size is 0 or the sizes are equal"
            ),
        }
    }
}

impl std::error::Error for ConsistencyError {}

/// In-memory store of every node (Vec per level) implementing
/// `NodeSource<Error = std::convert::Infallible>`. For tests and tools.
///
/// [`NodeSource::node`] answers only the nodes complete in the stored tree; for any other
/// (level, index) it returns the all-zero hash, since its error type cannot report anything. So
/// pass sizes of at most [`MemoryTree::len`] to [`root`] and the proof functions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryTree {
    /// `levels[l][i]` is `node(l, i)`.
    levels: Vec<Vec<Hash>>,
}

impl MemoryTree {
    /// An empty tree.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a leaf hash, storing it and every node it completes.
    pub fn push(&mut self, leaf_hash: &Hash) {
        let completed = match nodes_completed_by_append(&*self, self.len(), leaf_hash) {
            Ok(nodes) => nodes,
            Err(never) => match never {},
        };
        for (level, _index, hash) in completed {
            let level = level as usize;
            if self.levels.len() <= level {
                self.levels.resize_with(level + 1, Vec::new);
            }
            if let Some(nodes) = self.levels.get_mut(level) {
                nodes.push(hash);
            }
        }
    }

    /// Number of leaves.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.levels.first().map_or(0, |leaves| leaves.len() as u64)
    }

    /// Whether the tree has no leaves.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl NodeSource for MemoryTree {
    type Error = std::convert::Infallible;

    fn node(&self, level: u32, index: u64) -> Result<Hash, Self::Error> {
        let found = usize::try_from(level).ok().and_then(|level| {
            let index = usize::try_from(index).ok()?;
            self.levels.get(level)?.get(index).copied()
        });
        Ok(found.unwrap_or([0; 32]))
    }
}

/// Compact running root: the stack of perfect subtrees of a growing tree (O(log n) memory).
/// Used by a verifier that streams every leaf and needs the root at many prefix sizes.
///
/// The stack holds one hash per binary digit of [`Frontier::size`], largest subtree first —
/// exactly the nodes [`root`] would read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// Roots of the perfect subtrees, left to right (decreasing height).
    stack: Vec<Hash>,
}

impl Frontier {
    /// The frontier of the empty tree.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a leaf hash, merging the perfect subtrees it completes.
    ///
    /// A frontier of `u64::MAX` leaves is full (the next size is not a `u64`); pushing onto it
    /// leaves it unchanged rather than panicking. Reaching that size takes 2^64 pushes.
    pub fn push(&mut self, leaf_hash: &Hash) {
        let Some(new_size) = self.size.checked_add(1) else {
            return;
        };
        let mut cur = *leaf_hash;
        for _ in 0..self.size.trailing_ones() {
            match self.stack.pop() {
                Some(left) => cur = node_hash(&left, &cur),
                None => break, // unreachable: one stack entry per set bit of `size`
            }
        }
        self.stack.push(cur);
        self.size = new_size;
    }

    /// Number of leaves pushed so far.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The roots of the perfect subtrees, left to right (one per binary digit of
    /// [`Frontier::size`], largest first).
    #[must_use]
    pub fn subtrees(&self) -> &[Hash] {
        &self.stack
    }

    /// The frontier of a tree of `size` leaves whose perfect subtrees are `subtrees` (left to
    /// right), as [`Frontier::subtrees`] gives them; `None` unless there is exactly one per
    /// binary digit of `size`.
    #[must_use]
    pub fn from_parts(size: u64, subtrees: Vec<Hash>) -> Option<Frontier> {
        (subtrees.len() == size.count_ones() as usize).then_some(Frontier {
            size,
            stack: subtrees,
        })
    }

    /// Root hash of the leaves pushed so far (RFC 6962 §2.1 MTH); [`empty_root`] when empty.
    #[must_use]
    pub fn root(&self) -> Hash {
        let mut nodes = self.stack.iter().rev();
        match nodes.next() {
            None => empty_root(),
            Some(last) => nodes.fold(*last, |acc, left| node_hash(left, &acc)),
        }
    }
}

/// `x >> s`, 0 when `s >= 64`.
fn shr(x: u64, s: u32) -> u64 {
    x.checked_shr(s).unwrap_or(0)
}

/// The largest power of two strictly less than `n` (RFC 9162 §2.1.1 `k`); requires `n >= 2`.
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (u64::BITS - 1 - (n - 1).leading_zeros())
}

/// MTH(D[start:start+len]) for `len >= 1` and `start` aligned to the smallest power of two
/// `>= len`: the right fold of the perfect subtrees given by the binary digits of `len`, one
/// stored node each (at most 64 reads).
fn range_hash<S: NodeSource>(src: &S, start: u64, len: u64) -> Result<Hash, ProofError<S::Error>> {
    let mut acc: Option<Hash> = None;
    // From the smallest (rightmost) subtree to the largest (leftmost).
    for level in 0..u64::BITS {
        if shr(len, level) & 1 == 0 {
            continue;
        }
        // The subtree for digit `level` starts after all higher digits of `len`.
        let offset = start + shr(len, level + 1).checked_shl(level + 1).unwrap_or(0);
        let node = src
            .node(level, shr(offset, level))
            .map_err(ProofError::Source)?;
        acc = Some(match acc {
            None => node,
            Some(right) => node_hash(&node, &right),
        });
    }
    Ok(acc.unwrap_or_else(empty_root))
}

/// Length of PATH(index, D[0:size]) for `index < size`.
fn path_len(index: u64, size: u64) -> usize {
    let (inner, border) = decompose_inclusion(index, size);
    inner + border
}

/// Splits an inclusion proof for `index < size` into its inner part (levels where the path to
/// the leaf and the path to the last leaf differ) and its border part (left siblings on the
/// right edge above them). RFC 9162 §2.1.3.2 consumes the same hashes one by one.
fn decompose_inclusion(index: u64, size: u64) -> (usize, usize) {
    let inner = u64::BITS - (index ^ (size - 1)).leading_zeros();
    let border = shr(index, inner).count_ones();
    (inner as usize, border as usize)
}

/// Hashes `seed` up through the inner part of a proof; bit `i` of `index` tells whether the
/// proof hash at level `i` is a left (1) or right (0) sibling.
fn chain_inner(seed: Hash, proof: &[Hash], index: u64) -> Hash {
    let mut levels = 0u32..;
    proof.iter().fold(seed, |acc, sibling| {
        let level = levels.next().unwrap_or(u32::MAX);
        if shr(index, level) & 1 == 0 {
            node_hash(&acc, sibling)
        } else {
            node_hash(sibling, &acc)
        }
    })
}

/// Like [`chain_inner`] but only applies left siblings: recomputes the root of the smaller tree
/// from a consistency proof (right siblings lie beyond its last leaf).
fn chain_inner_right(seed: Hash, proof: &[Hash], index: u64) -> Hash {
    let mut levels = 0u32..;
    proof.iter().fold(seed, |acc, sibling| {
        let level = levels.next().unwrap_or(u32::MAX);
        if shr(index, level) & 1 == 1 {
            node_hash(sibling, &acc)
        } else {
            acc
        }
    })
}

/// Hashes `seed` up the right edge: every remaining proof hash is a left sibling.
fn chain_border_right(seed: Hash, proof: &[Hash]) -> Hash {
    proof
        .iter()
        .fold(seed, |acc, sibling| node_hash(sibling, &acc))
}

/// Lowercase hex display of a hash, without allocating.
struct HexHash<'a>(&'a Hash);

impl fmt::Display for HexHash<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;
    use std::convert::Infallible;

    fn vectors() -> Value {
        crate::test_vectors::load("merkle_rfc6962.json")
    }

    fn h(v: &Value) -> Hash {
        let s = v.as_str().expect("hash must be a hex string");
        let bytes = hex::decode(s).expect("hash must be hex");
        bytes.try_into().expect("hash must be 32 bytes")
    }

    fn hashes(v: &Value) -> Vec<Hash> {
        v.as_array()
            .expect("array of hashes")
            .iter()
            .map(h)
            .collect()
    }

    fn u(v: &Value) -> u64 {
        v.as_u64().expect("unsigned integer")
    }

    fn arr<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
        v[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} must be an array"))
    }

    fn hx(h: &Hash) -> String {
        hex::encode(h)
    }

    /// `MemoryTree` over the 8 reference leaves.
    fn reference_tree(v: &Value) -> MemoryTree {
        let mut t = MemoryTree::new();
        for lh in arr(v, "leaf_hashes") {
            t.push(&h(lh));
        }
        t
    }

    fn memory_tree_of(leaves: &[Hash]) -> MemoryTree {
        let mut t = MemoryTree::new();
        for l in leaves {
            t.push(l);
        }
        t
    }

    fn ok<T>(r: Result<T, ProofError<Infallible>>) -> T {
        match r {
            Ok(x) => x,
            Err(ProofError::IndexOutOfRange { index, size }) => {
                panic!("index {index} out of range {size}")
            }
            Err(ProofError::SizeOrder { from, to }) => panic!("size order {from} > {to}"),
            Err(ProofError::Source(e)) => match e {},
        }
    }

    // ----- reference implementation: the recursive definitions of RFC 6962 §2.1 -----

    fn ref_mth(d: &[Hash]) -> Hash {
        match d.len() {
            0 => empty_root(),
            1 => d[0],
            n => {
                let k = split_point(n as u64) as usize;
                node_hash(&ref_mth(&d[..k]), &ref_mth(&d[k..]))
            }
        }
    }

    fn ref_path(m: usize, d: &[Hash]) -> Vec<Hash> {
        let n = d.len();
        if n <= 1 {
            return Vec::new();
        }
        let k = split_point(n as u64) as usize;
        if m < k {
            let mut p = ref_path(m, &d[..k]);
            p.push(ref_mth(&d[k..]));
            p
        } else {
            let mut p = ref_path(m - k, &d[k..]);
            p.push(ref_mth(&d[..k]));
            p
        }
    }

    fn ref_subproof(m: usize, d: &[Hash], b: bool) -> Vec<Hash> {
        let n = d.len();
        if m == n {
            return if b { Vec::new() } else { vec![ref_mth(d)] };
        }
        let k = split_point(n as u64) as usize;
        if m <= k {
            let mut p = ref_subproof(m, &d[..k], b);
            p.push(ref_mth(&d[k..]));
            p
        } else {
            let mut p = ref_subproof(m - k, &d[k..], false);
            p.push(ref_mth(&d[..k]));
            p
        }
    }

    fn ref_proof(m: usize, d: &[Hash]) -> Vec<Hash> {
        if m == 0 || m == d.len() {
            Vec::new()
        } else {
            ref_subproof(m, d, true)
        }
    }

    fn numbered_leaves(n: u32) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    // ----- vector tests -----

    #[test]
    fn vector_leaf_hashes() {
        let v = vectors();
        let leaves = arr(&v, "leaves_hex");
        let expected = arr(&v, "leaf_hashes");
        assert_eq!(leaves.len(), 8);
        assert_eq!(expected.len(), 8);
        for (l, e) in leaves.iter().zip(expected) {
            let data = hex::decode(l.as_str().unwrap()).unwrap();
            assert_eq!(hx(&leaf_hash(&data)), e.as_str().unwrap());
        }
    }

    #[test]
    fn vector_roots_memory_tree_and_frontier() {
        let v = vectors();
        let tree = reference_tree(&v);
        assert_eq!(tree.len(), 8);
        let roots = arr(&v, "roots");
        assert_eq!(roots.len(), 9);
        let leaf_hashes = hashes(&v["leaf_hashes"]);
        let mut frontier = Frontier::new();
        let mut checked = 0;
        for (size, r) in roots.iter().enumerate() {
            let size = size as u64;
            assert_eq!(u(&r["tree_size"]), size);
            let expected = h(&r["root"]);
            // Frontier holds the first `size` leaves here.
            assert_eq!(frontier.size(), size);
            assert_eq!(hx(&frontier.root()), hx(&expected), "frontier size {size}");
            assert_eq!(
                hx(&ok(root(&tree, size))),
                hx(&expected),
                "tree size {size}"
            );
            // A tree of exactly `size` leaves agrees too.
            let small = memory_tree_of(&leaf_hashes[..size as usize]);
            assert_eq!(small.len(), size);
            assert_eq!(small.is_empty(), size == 0);
            assert_eq!(ok(root(&small, size)), expected);
            assert_eq!(ref_mth(&leaf_hashes[..size as usize]), expected);
            if let Some(l) = leaf_hashes.get(size as usize) {
                frontier.push(l);
            }
            checked += 1;
        }
        assert_eq!(checked, 9);
        assert_eq!(
            h(&roots[0]["root"]),
            empty_root(),
            "size 0 root is SHA-256(\"\")"
        );
    }

    #[test]
    fn vector_complete_subtree_hashes() {
        let v = vectors();
        let tree = reference_tree(&v);
        let levels = arr(&v["complete_subtree_hashes"], "levels");
        assert_eq!(levels.len(), 4);
        let mut checked = 0;
        for (level, nodes) in levels.iter().enumerate() {
            let nodes = nodes.as_array().unwrap();
            assert_eq!(nodes.len(), 8 >> level);
            for (index, node) in nodes.iter().enumerate() {
                let got = ok(tree
                    .node(level as u32, index as u64)
                    .map_err(ProofError::Source));
                assert_eq!(hx(&got), node.as_str().unwrap(), "node({level}, {index})");
                checked += 1;
            }
        }
        assert_eq!(checked, 15);
        // Nodes not complete in the tree are answered with zeros, never a panic.
        assert_eq!(ok(tree.node(0, 8).map_err(ProofError::Source)), [0; 32]);
        assert_eq!(ok(tree.node(4, 0).map_err(ProofError::Source)), [0; 32]);
        assert_eq!(
            ok(tree.node(u32::MAX, u64::MAX).map_err(ProofError::Source)),
            [0; 32]
        );
    }

    #[test]
    fn vector_inclusion_proofs_generated_and_verified() {
        let v = vectors();
        let tree = reference_tree(&v);
        let cases = arr(&v, "inclusion");
        assert_eq!(cases.len(), 36);
        let mut seen = std::collections::HashSet::new();
        for c in cases {
            let (index, size) = (u(&c["leaf_index"]), u(&c["tree_size"]));
            assert!(seen.insert((index, size)));
            let (leaf, r, proof) = (h(&c["leaf_hash"]), h(&c["root"]), hashes(&c["proof"]));
            // Proofs against the full 8-leaf store and against a store of exactly `size` leaves.
            let generated = ok(inclusion_proof(&tree, index, size));
            assert_eq!(generated, proof, "PATH({index}, D[0:{size}])");
            let small = memory_tree_of(&hashes(&v["leaf_hashes"])[..size as usize]);
            assert_eq!(ok(inclusion_proof(&small, index, size)), proof);
            assert_eq!(ok(root(&tree, size)), r);
            assert_eq!(ok(tree.node(0, index).map_err(ProofError::Source)), leaf);
            assert_eq!(verify_inclusion(&leaf, index, size, &proof, &r), Ok(()));
        }
        assert_eq!(seen.len(), 36);
    }

    #[test]
    fn vector_consistency_proofs_generated_and_verified() {
        let v = vectors();
        let tree = reference_tree(&v);
        let cases = arr(&v, "consistency");
        assert_eq!(cases.len(), 36);
        let mut seen = std::collections::HashSet::new();
        for c in cases {
            let (m, n) = (u(&c["size1"]), u(&c["size2"]));
            assert!(seen.insert((m, n)));
            let (r1, r2, proof) = (h(&c["root1"]), h(&c["root2"]), hashes(&c["proof"]));
            let generated = ok(consistency_proof(&tree, m, n));
            assert_eq!(generated, proof, "PROOF({m}, D[0:{n}])");
            assert_eq!(ok(root(&tree, m)), r1);
            assert_eq!(ok(root(&tree, n)), r2);
            assert_eq!(verify_consistency(m, n, &r1, &r2, &proof), Ok(()));
        }
        assert_eq!(seen.len(), 36);
    }

    #[test]
    fn vector_inclusion_invalid_rejected() {
        let v = vectors();
        let cases = arr(&v, "inclusion_invalid");
        assert_eq!(cases.len(), 13);
        for c in cases {
            assert_eq!(c["expect"], "reject");
            let r = verify_inclusion(
                &h(&c["leaf_hash"]),
                u(&c["leaf_index"]),
                u(&c["tree_size"]),
                &hashes(&c["proof"]),
                &h(&c["root"]),
            );
            assert!(r.is_err(), "accepted: {}", c["desc"]);
        }
    }

    #[test]
    fn vector_consistency_invalid_rejected() {
        let v = vectors();
        let cases = arr(&v, "consistency_invalid");
        assert_eq!(cases.len(), 15);
        for c in cases {
            assert_eq!(c["expect"], "reject");
            let r = verify_consistency(
                u(&c["size1"]),
                u(&c["size2"]),
                &h(&c["root1"]),
                &h(&c["root2"]),
                &hashes(&c["proof"]),
            );
            assert!(r.is_err(), "accepted: {}", c["desc"]);
        }
    }

    #[test]
    fn vector_hasher() {
        let v = vectors();
        let cases = arr(&v, "hasher");
        assert_eq!(cases.len(), 4);
        let mut kinds = Vec::new();
        for c in cases {
            let kind = c["kind"].as_str().unwrap();
            let got = match kind {
                "leaf" => leaf_hash(&hex::decode(c["input_hex"].as_str().unwrap()).unwrap()),
                "node" => node_hash(&h(&c["left"]), &h(&c["right"])),
                "empty" => empty_root(),
                other => panic!("unknown hasher kind {other}"),
            };
            assert_eq!(hx(&got), c["hash"].as_str().unwrap(), "{kind}");
            kinds.push(kind.to_owned());
        }
        assert_eq!(kinds, ["leaf", "leaf", "node", "empty"]);
    }

    #[test]
    fn vector_ct_log_inclusion() {
        let v = vectors();
        let c = &v["ct_log_inclusion"];
        let (index, size) = (u(&c["leaf_index"]), u(&c["tree_size"]));
        assert_eq!((index, size), (848_049, 3_630_887));
        let (leaf, r, proof) = (h(&c["leaf_hash"]), h(&c["root"]), hashes(&c["proof"]));
        assert_eq!(proof.len(), 22);
        assert_eq!(verify_inclusion(&leaf, index, size, &proof, &r), Ok(()));
        // Any single-bit corruption, a wrong index or a wrong size is rejected.
        for i in 0..proof.len() {
            let mut bad = proof.clone();
            bad[i][31] ^= 1;
            assert!(matches!(
                verify_inclusion(&leaf, index, size, &bad, &r),
                Err(InclusionError::RootMismatch { .. })
            ));
        }
        assert!(verify_inclusion(&leaf, index + 1, size, &proof, &r).is_err());
        assert!(verify_inclusion(&leaf, index, size * 2, &proof, &r).is_err());
        let mut bad_leaf = leaf;
        bad_leaf[0] ^= 0x80;
        assert!(verify_inclusion(&bad_leaf, index, size, &proof, &r).is_err());
    }

    #[test]
    fn vector_large_trees() {
        let v = vectors();
        let trees = arr(&v, "large_trees");
        assert_eq!(trees.len(), 3);
        let (mut n_incl, mut n_cons) = (0, 0);
        for t in trees {
            let count = u(&t["leaf_count"]);
            let leaves = numbered_leaves(count as u32);
            let tree = memory_tree_of(&leaves);
            let mut frontier = Frontier::new();
            for l in &leaves {
                frontier.push(l);
            }
            let r = h(&t["root"]);
            assert_eq!(tree.len(), count);
            assert_eq!(hx(&ok(root(&tree, count))), hx(&r), "root of {count}");
            assert_eq!(frontier.root(), r);
            assert_eq!(frontier.size(), count);
            for c in arr(t, "inclusion") {
                let (index, size) = (u(&c["leaf_index"]), u(&c["tree_size"]));
                assert_eq!(size, count);
                let data = hex::decode(c["leaf_data"].as_str().unwrap()).unwrap();
                assert_eq!(data, (index as u32).to_be_bytes());
                let leaf = h(&c["leaf_hash"]);
                assert_eq!(leaf_hash(&data), leaf);
                let proof = hashes(&c["proof"]);
                assert_eq!(ok(inclusion_proof(&tree, index, size)), proof);
                assert_eq!(verify_inclusion(&leaf, index, size, &proof, &r), Ok(()));
                n_incl += 1;
            }
            for c in arr(t, "consistency") {
                let (m, n) = (u(&c["size1"]), u(&c["size2"]));
                assert_eq!(n, count);
                let (r1, r2, proof) = (h(&c["root1"]), h(&c["root2"]), hashes(&c["proof"]));
                assert_eq!(r2, r);
                assert_eq!(ok(root(&tree, m)), r1);
                assert_eq!(ok(consistency_proof(&tree, m, n)), proof);
                assert_eq!(verify_consistency(m, n, &r1, &r2, &proof), Ok(()));
                n_cons += 1;
            }
        }
        assert_eq!((n_incl, n_cons), (23, 19));
    }

    // ----- structural tests -----

    /// Checks generation against the recursive RFC definitions and verification of every
    /// generated proof, for every (index, size) and (m, n) up to 70 leaves.
    #[test]
    fn matches_recursive_definitions_up_to_70() {
        let leaves = numbered_leaves(70);
        let tree = memory_tree_of(&leaves);
        let mut pairs = 0;
        for n in 0..=70usize {
            let d = &leaves[..n];
            let r = ref_mth(d);
            assert_eq!(ok(root(&tree, n as u64)), r);
            for i in 0..n {
                let p = ok(inclusion_proof(&tree, i as u64, n as u64));
                assert_eq!(p, ref_path(i, d), "PATH({i}, {n})");
                assert_eq!(p.len(), path_len(i as u64, n as u64));
                assert_eq!(
                    verify_inclusion(&leaves[i], i as u64, n as u64, &p, &r),
                    Ok(())
                );
                // Wrong leaf, each corrupted hash, missing or extra hash: rejected.
                assert!(
                    verify_inclusion(&leaves[(i + 1) % 70], i as u64, n as u64, &p, &r).is_err()
                );
                for j in 0..p.len() {
                    let mut bad = p.clone();
                    bad[j][j % 32] ^= 4;
                    assert!(verify_inclusion(&leaves[i], i as u64, n as u64, &bad, &r).is_err());
                }
                let mut longer = p.clone();
                longer.push(r);
                assert!(matches!(
                    verify_inclusion(&leaves[i], i as u64, n as u64, &longer, &r),
                    Err(InclusionError::WrongProofLength { .. })
                ));
                if !p.is_empty() {
                    assert!(matches!(
                        verify_inclusion(&leaves[i], i as u64, n as u64, &p[1..], &r),
                        Err(InclusionError::WrongProofLength { .. })
                    ));
                }
                pairs += 1;
            }
            for m in 0..=n {
                let old = ref_mth(&leaves[..m]);
                let p = ok(consistency_proof(&tree, m as u64, n as u64));
                assert_eq!(p, ref_proof(m, d), "PROOF({m}, {n})");
                assert_eq!(verify_consistency(m as u64, n as u64, &old, &r, &p), Ok(()));
                if m > 0 && m < n {
                    for j in 0..p.len() {
                        let mut bad = p.clone();
                        bad[j][0] ^= 1;
                        assert!(verify_consistency(m as u64, n as u64, &old, &r, &bad).is_err());
                    }
                    let wrong_old = ref_mth(&leaves[..m - 1]);
                    assert!(verify_consistency(m as u64, n as u64, &wrong_old, &r, &p).is_err());
                    assert!(verify_consistency(m as u64, n as u64, &old, &old, &p).is_err());
                    assert!(verify_consistency(m as u64, n as u64, &old, &r, &p[1..]).is_err());
                    let mut longer = p.clone();
                    longer.push(r);
                    assert!(verify_consistency(m as u64, n as u64, &old, &r, &longer).is_err());
                }
                pairs += 1;
            }
        }
        // 70·71/2 inclusion pairs + 71·72/2 consistency pairs.
        assert_eq!(pairs, 2485 + 2556);
    }

    #[test]
    fn frontier_matches_tree_at_every_prefix() {
        let leaves = numbered_leaves(600);
        let mut tree = MemoryTree::new();
        let mut frontier = Frontier::new();
        assert_eq!(frontier.root(), empty_root());
        for (i, l) in leaves.iter().enumerate() {
            tree.push(l);
            frontier.push(l);
            assert_eq!(frontier.size(), i as u64 + 1);
            assert_eq!(frontier.stack.len() as u32, frontier.size().count_ones());
            assert_eq!(frontier.root(), ok(root(&tree, i as u64 + 1)));
        }
        assert_eq!(frontier.root(), ref_mth(&leaves));
        // A full frontier ignores pushes instead of overflowing.
        let mut full = Frontier {
            size: u64::MAX,
            stack: vec![[7; 32]; 64],
        };
        let before = full.clone();
        full.push(&[1; 32]);
        assert_eq!(full, before);
    }

    #[test]
    fn nodes_completed_by_append_reproduces_memory_tree() {
        // A store fed only by nodes_completed_by_append, read back through NodeSource.
        struct MapStore(RefCell<HashMap<(u32, u64), Hash>>);
        impl NodeSource for MapStore {
            type Error = (u32, u64);
            fn node(&self, level: u32, index: u64) -> Result<Hash, Self::Error> {
                self.0
                    .borrow()
                    .get(&(level, index))
                    .copied()
                    .ok_or((level, index))
            }
        }
        let leaves = numbered_leaves(1025);
        let store = MapStore(RefCell::new(HashMap::new()));
        let mut tree = MemoryTree::new();
        for (i, l) in leaves.iter().enumerate() {
            let i = i as u64;
            let nodes = nodes_completed_by_append(&store, i, l).expect("left siblings stored");
            assert_eq!(nodes.len() as u32, 1 + i.trailing_ones());
            assert_eq!(nodes[0], (0, i, *l));
            for (k, &(level, index, hash)) in nodes.iter().enumerate() {
                assert_eq!(level, k as u32, "increasing levels");
                // Each node is perfect and ends exactly at the new leaf.
                assert_eq!((index + 1) << level, i + 1);
                let prev = store.0.borrow_mut().insert((level, index), hash);
                assert!(prev.is_none(), "node ({level}, {index}) completed twice");
            }
            tree.push(l);
        }
        let map = store.0.borrow();
        let mut count = 0;
        for level in 0..=10u32 {
            let width = 1025u64 >> level;
            for index in 0..width {
                assert_eq!(
                    map.get(&(level, index)),
                    Some(&ok(tree.node(level, index).map_err(ProofError::Source)))
                );
                count += 1;
            }
        }
        assert_eq!(count, map.len(), "no extra nodes");
        assert_eq!(count, 2 * 1025 - 1025u64.count_ones() as usize);
        assert_eq!(root(&store, 1025).unwrap(), ref_mth(&leaves));
        // A missing node surfaces as the source's error.
        assert_eq!(root(&store, 1026), Err(ProofError::Source((1, 512))));
        assert_eq!(
            nodes_completed_by_append(&MapStore(RefCell::new(HashMap::new())), 3, &[0; 32]),
            Err((0, 2))
        );
    }

    /// A tree of any size, storing nothing: node(level, index) = H(level ‖ index). Counts reads
    /// and checks that only nodes complete in a tree of `size` leaves are read.
    struct Synthetic {
        size: Cell<u64>,
        reads: Cell<u32>,
    }

    impl Synthetic {
        fn new() -> Self {
            Self {
                size: Cell::new(0),
                reads: Cell::new(0),
            }
        }
        fn begin(&self, size: u64) {
            self.size.set(size);
            self.reads.set(0);
        }
    }

    impl NodeSource for Synthetic {
        type Error = Infallible;
        fn node(&self, level: u32, index: u64) -> Result<Hash, Infallible> {
            assert!(level < 64);
            let end = (u128::from(index) + 1) << level;
            assert!(
                end <= u128::from(self.size.get()),
                "node ({level}, {index}) is not complete in a tree of {}",
                self.size.get()
            );
            self.reads.set(self.reads.get() + 1);
            let mut pre = [0u8; 12];
            pre[..4].copy_from_slice(&level.to_be_bytes());
            pre[4..].copy_from_slice(&index.to_be_bytes());
            Ok(leaf_hash(&pre))
        }
    }

    #[test]
    fn proofs_read_log_n_nodes() {
        let src = Synthetic::new();
        let sizes = [
            1_000_000u64,
            1_048_576,
            1_048_575,
            999_999,
            (1 << 40) + 12345,
            u64::MAX,
            u64::MAX - 1,
            (1 << 63) + 1,
            1 << 63,
        ];
        let (mut checked, mut max_reads) = (0, 0);
        for &n in &sizes {
            src.begin(n);
            let r = ok(root(&src, n));
            assert_eq!(src.reads.get(), n.count_ones());
            let mut positions = vec![0, 1, n / 2, n / 3, n - 2, n - 1];
            positions.extend((0..64).map(|b| (1u64 << b).min(n - 1)));
            positions.extend((0..64).map(|b| (1u64 << b).saturating_sub(1).min(n - 1)));
            for &i in &positions {
                src.begin(n);
                let p = ok(inclusion_proof(&src, i, n));
                assert!(
                    src.reads.get() <= 127,
                    "inclusion {i}/{n}: {} reads",
                    src.reads.get()
                );
                max_reads = max_reads.max(src.reads.get());
                assert_eq!(p.len(), path_len(i, n));
                src.begin(n);
                let leaf = ok(src.node(0, i).map_err(ProofError::Source));
                // The synthetic nodes are not hashes of their children, so most proofs do not
                // verify, but generator and verifier must agree on the length.
                assert!(matches!(
                    verify_inclusion(&leaf, i, n, &p, &r),
                    Ok(()) | Err(InclusionError::RootMismatch { .. })
                ));

                let m = i + 1; // 1..=n
                src.begin(n);
                let c = ok(consistency_proof(&src, m, n));
                assert!(
                    src.reads.get() <= 127,
                    "consistency {m}/{n}: {} reads",
                    src.reads.get()
                );
                max_reads = max_reads.max(src.reads.get());
                src.begin(m);
                let old = ok(root(&src, m));
                // Likewise (a proof that uses no synthetic interior node, such as 2^19 -> 10^6,
                // even verifies).
                let verdict = verify_consistency(m, n, &old, &r, &c);
                assert!(
                    matches!(
                        verdict,
                        Ok(())
                            | Err(ConsistencyError::OldRootMismatch { .. }
                                | ConsistencyError::NewRootMismatch { .. })
                    ),
                    "{m}/{n}: {verdict:?}"
                );
                assert_eq!(c.is_empty(), m == n);

                // Appending leaf number i reads only left siblings complete before it.
                src.begin(i);
                let nodes =
                    ok(nodes_completed_by_append(&src, i, &leaf).map_err(ProofError::Source));
                assert_eq!(src.reads.get(), i.trailing_ones());
                assert_eq!(nodes.len() as u32, 1 + i.trailing_ones());
                checked += 1;
            }
        }
        assert_eq!(checked, sizes.len() * (6 + 128));
        // The worst case is reached: e.g. PROOF(3, D[0:2^64-1]) reads the 2^63-1 right edge
        // (63 nodes), 63 more siblings and the final MTH(D[2:3]).
        assert_eq!(max_reads, 127);
    }

    #[test]
    fn append_at_u64_max_does_not_overflow() {
        let src = Synthetic::new();
        src.begin(u64::MAX);
        let nodes =
            ok(nodes_completed_by_append(&src, u64::MAX, &[3; 32]).map_err(ProofError::Source));
        assert_eq!(nodes.len(), 65);
        assert_eq!(nodes.last().map(|n| (n.0, n.1)), Some((64, 0)));
        assert_eq!(src.reads.get(), 64);
    }

    #[test]
    fn argument_errors_do_not_panic() {
        let tree = memory_tree_of(&numbered_leaves(5));
        assert_eq!(ok(root(&tree, 0)), empty_root());
        assert_eq!(
            inclusion_proof(&tree, 0, 0),
            Err(ProofError::IndexOutOfRange { index: 0, size: 0 })
        );
        assert_eq!(
            inclusion_proof(&tree, 5, 5),
            Err(ProofError::IndexOutOfRange { index: 5, size: 5 })
        );
        assert_eq!(
            inclusion_proof(&tree, u64::MAX, u64::MAX),
            Err(ProofError::IndexOutOfRange {
                index: u64::MAX,
                size: u64::MAX
            })
        );
        assert_eq!(
            consistency_proof(&tree, 5, 4),
            Err(ProofError::SizeOrder { from: 5, to: 4 })
        );
        assert_eq!(ok(consistency_proof(&tree, 0, 5)), Vec::<Hash>::new());
        assert_eq!(ok(consistency_proof(&tree, 5, 5)), Vec::<Hash>::new());
        assert_eq!(ok(consistency_proof(&tree, 0, 0)), Vec::<Hash>::new());
        assert_eq!(ok(inclusion_proof(&tree, 0, 1)), Vec::<Hash>::new());

        let z = [0u8; 32];
        let e = empty_root();
        assert_eq!(
            verify_inclusion(&z, 0, 0, &[], &e),
            Err(InclusionError::IndexOutOfRange { index: 0, size: 0 })
        );
        assert_eq!(
            verify_inclusion(&z, u64::MAX, u64::MAX, &[], &z),
            Err(InclusionError::IndexOutOfRange {
                index: u64::MAX,
                size: u64::MAX
            })
        );
        // Extreme sizes: only length errors or mismatches, never a panic.
        for (i, n) in [
            (0, u64::MAX),
            (u64::MAX - 1, u64::MAX),
            (1 << 63, u64::MAX),
            ((1 << 63) - 1, 1 << 63),
        ] {
            for len in [0usize, 1, 63, 64, 65, 200] {
                let proof = vec![z; len];
                assert!(verify_inclusion(&z, i, n, &proof, &z).is_err());
            }
        }
        for (m, n) in [
            (1, u64::MAX),
            (u64::MAX - 1, u64::MAX),
            (1 << 63, u64::MAX),
            ((1 << 63) + 1, u64::MAX),
            (u64::MAX, u64::MAX),
            (3, 1 << 63),
        ] {
            for len in [0usize, 1, 2, 63, 64, 65, 127, 128, 200] {
                let proof = vec![z; len];
                assert!(verify_consistency(m, n, &z, &e, &proof).is_err());
            }
        }
        assert_eq!(
            verify_consistency(u64::MAX, 0, &z, &z, &[]),
            Err(ConsistencyError::SizeOrder {
                from: u64::MAX,
                to: 0
            })
        );
        assert_eq!(
            verify_consistency(3, 7, &z, &z, &[]),
            Err(ConsistencyError::WrongProofLength {
                expected: 4,
                found: 0
            })
        );
    }

    #[test]
    fn consistency_edge_policies() {
        let leaves = numbered_leaves(5);
        let r5 = ref_mth(&leaves);
        let r4 = ref_mth(&leaves[..4]);
        let e = empty_root();
        // m == 0: ok iff proof empty and old root is the empty root (any new root).
        assert_eq!(verify_consistency(0, 5, &e, &r5, &[]), Ok(()));
        assert_eq!(
            verify_consistency(0, 5, &r4, &r5, &[]),
            Err(ConsistencyError::OldRootMismatch {
                expected: r4,
                computed: e
            })
        );
        assert_eq!(
            verify_consistency(0, 5, &e, &r5, &[r5]),
            Err(ConsistencyError::NonEmptyProof)
        );
        assert_eq!(verify_consistency(0, 0, &e, &e, &[]), Ok(()));
        assert!(verify_consistency(0, 0, &e, &r5, &[]).is_err());
        // m == n.
        assert_eq!(verify_consistency(5, 5, &r5, &r5, &[]), Ok(()));
        assert_eq!(
            verify_consistency(5, 5, &r4, &r5, &[]),
            Err(ConsistencyError::NewRootMismatch {
                expected: r5,
                computed: r4
            })
        );
        assert_eq!(
            verify_consistency(5, 5, &r5, &r5, &[r5]),
            Err(ConsistencyError::NonEmptyProof)
        );
        // Error evidence: the computed roots are the ones the proof implies.
        let tree = memory_tree_of(&leaves);
        let p = ok(consistency_proof(&tree, 4, 5));
        assert_eq!(
            verify_consistency(4, 5, &r4, &e, &p),
            Err(ConsistencyError::NewRootMismatch {
                expected: e,
                computed: r5
            })
        );
        let p = ok(consistency_proof(&tree, 3, 5));
        let r3 = ref_mth(&leaves[..3]);
        assert_eq!(
            verify_consistency(3, 5, &e, &r5, &p),
            Err(ConsistencyError::OldRootMismatch {
                expected: e,
                computed: r3
            })
        );
        let ip = ok(inclusion_proof(&tree, 2, 5));
        assert_eq!(
            verify_inclusion(&leaves[2], 2, 5, &ip, &e),
            Err(InclusionError::RootMismatch {
                expected: e,
                computed: r5
            })
        );
    }

    #[test]
    fn source_errors_propagate() {
        #[derive(Debug, PartialEq)]
        struct Broken;
        impl fmt::Display for Broken {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("disk on fire")
            }
        }
        impl std::error::Error for Broken {}
        impl NodeSource for Broken {
            type Error = Broken;
            fn node(&self, _: u32, _: u64) -> Result<Hash, Broken> {
                Err(Broken)
            }
        }
        assert_eq!(root(&Broken, 0), Ok(empty_root()));
        assert_eq!(root(&Broken, 9), Err(ProofError::Source(Broken)));
        assert_eq!(
            inclusion_proof(&Broken, 3, 9),
            Err(ProofError::Source(Broken))
        );
        assert_eq!(
            consistency_proof(&Broken, 3, 9),
            Err(ProofError::Source(Broken))
        );
        assert_eq!(inclusion_proof(&Broken, 0, 1), Ok(vec![]));
        let e = root(&Broken, 9).unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading a Merkle tree node failed: disk on fire"
        );
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn display_shows_hex_hashes() {
        let a = [0xab; 32];
        let b = empty_root();
        let e = InclusionError::RootMismatch {
            expected: a,
            computed: b,
        };
        let s = e.to_string();
        assert!(s.contains(&"ab".repeat(32)), "{s}");
        assert!(s.contains("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        for e in [
            ConsistencyError::OldRootMismatch {
                expected: a,
                computed: b,
            },
            ConsistencyError::NewRootMismatch {
                expected: a,
                computed: b,
            },
        ] {
            let s = e.to_string();
            assert!(s.contains(&"ab".repeat(32)) && s.contains(&hx(&b)), "{s}");
        }
        let all: [&dyn std::error::Error; 7] = [
            &InclusionError::IndexOutOfRange { index: 1, size: 1 },
            &InclusionError::WrongProofLength {
                expected: 2,
                found: 3,
            },
            &ConsistencyError::SizeOrder { from: 2, to: 1 },
            &ConsistencyError::WrongProofLength {
                expected: 2,
                found: 3,
            },
            &ConsistencyError::NonEmptyProof,
            &ProofError::<Infallible>::IndexOutOfRange { index: 1, size: 1 },
            &ProofError::<Infallible>::SizeOrder { from: 2, to: 1 },
        ];
        for e in all {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn hashes_equal_is_equality() {
        let a = leaf_hash(b"a");
        let mut b = a;
        assert!(hashes_equal(&a, &b));
        b[31] ^= 1;
        assert!(!hashes_equal(&a, &b));
        b = a;
        b[0] ^= 0x80;
        assert!(!hashes_equal(&a, &b));
    }
}
