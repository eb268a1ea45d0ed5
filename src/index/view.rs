//! Staged writes over a read: what one batch has put and deleted so far, read before the
//! underlying state, with savepoints so one operation of a batch can be undone alone.
//!
//! The staging is a vector of values and, per keyspace, a hash map from the key (the caller's
//! own vector, moved in) to its slot: a read of a staged or unstaged key allocates nothing to
//! look it up, a put of a key already staged replaces its value in place, and the undo log
//! holds slot numbers, not copies of keys. (The ordered map it replaces copied the key on
//! every lookup and every undo step.) Order is given only when the batch is taken as
//! [`Changes`], which keep their keys in order.
//!
//! What a read finds in the base, present or absent, is kept too until the batch is taken, so
//! the gate and [`super::apply`] asking for the same key (a thread's head, a request's state,
//! the policy in force) reach the engine once per batch, not once per question.

use std::cell::{Cell, RefCell};

use crate::error::{Error, Result};
use crate::format::merkle::{Hash, NodeSource};
use crate::format::tile::{TileAppend, TileError, TileNodes, TileSource};
use crate::hashing::{Map, map_with_capacity};
use crate::storage::{Changes, Keyspace, Read};

use super::keys::tile_key;

/// A staged value: `Some` a put, `None` a delete.
type Staged = Option<Vec<u8>>;

/// One undo step.
enum Undo {
    /// The slot held this before.
    Was(usize, Staged),
    /// The slot was created (its key was not staged).
    Created(usize),
    /// The slot's value was this long before bytes were appended to it.
    Truncated(usize, usize),
}

/// The slot of `ks` in the per-keyspace maps (keyspaces are numbered in declaration order,
/// which is the order of [`Keyspace::ALL`]: a unit test holds the two equal).
fn ks_index(ks: Keyspace) -> usize {
    ks as usize
}

/// How many keys a view's maps held, per keyspace, staged and read: what a view over the next
/// batch starts its maps with ([`View::with_capacity`]). A batch's maps grown from empty
/// rehash every key about twice on the way; a view sized by the batch before does not.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capacity {
    staged: [usize; Keyspace::ALL.len()],
    read: [usize; Keyspace::ALL.len()],
}

/// The most keys of one keyspace a [`Capacity`] asks for: a one-off batch of unusual size
/// leaves the next ones no larger than this.
const MAX_CAPACITY: usize = 1 << 14;

/// Staged writes over `base`.
pub struct View<'a> {
    base: &'a dyn Read,
    /// Per keyspace: a staged key to its slot.
    keys: [Map<Vec<u8>, usize>; Keyspace::ALL.len()],
    /// The staged value of each slot.
    slots: Vec<Staged>,
    undo: Vec<Undo>,
    /// Whether changes are logged in `undo` (a view that is never rolled back keeps no log:
    /// [`View::without_undo`]).
    keep_undo: bool,
    /// Bytes of keys and values staged since the last take, counted when staged (a value
    /// replaced, grown or rolled back is not taken off): an upper bound of what the view holds.
    staged_bytes: usize,
    /// Per keyspace: what reads found in the base since the last take (`None`: absent). The
    /// base does not change under a view until the view is taken, which empties this.
    read: RefCell<[Map<Vec<u8>, Staged>; Keyspace::ALL.len()]>,
    /// Bytes of keys and values in `read`, counted as they were read.
    read_bytes: Cell<usize>,
}

impl<'a> View<'a> {
    /// An empty view over `base`.
    pub fn new(base: &'a dyn Read) -> View<'a> {
        View::with_capacity(base, &Capacity::default())
    }

    /// An empty view over `base` whose maps start with room for `capacity` (at most
    /// `MAX_CAPACITY` keys of a keyspace).
    pub fn with_capacity(base: &'a dyn Read, capacity: &Capacity) -> View<'a> {
        let room = |n: usize| n.min(MAX_CAPACITY);
        let staged: usize = capacity.staged.iter().map(|&n| room(n)).sum();
        View {
            base,
            keys: std::array::from_fn(|i| map_with_capacity(room(capacity.staged[i]))),
            slots: Vec::with_capacity(staged),
            undo: Vec::with_capacity(staged),
            keep_undo: true,
            staged_bytes: 0,
            read: RefCell::new(std::array::from_fn(|i| {
                map_with_capacity(room(capacity.read[i]))
            })),
            read_bytes: Cell::new(0),
        }
    }

    /// How many keys the view holds now, per keyspace, staged and read: the capacity to start
    /// the next batch's view with.
    pub fn capacity_used(&self) -> Capacity {
        let read = self.read.borrow();
        Capacity {
            staged: std::array::from_fn(|i| self.keys[i].len()),
            read: std::array::from_fn(|i| read[i].len()),
        }
    }

    /// Reads a value, staged first.
    ///
    /// # Errors
    /// A storage error.
    pub fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(ks, key, |v| v.map(<[u8]>::to_vec))
    }

    /// Reads a value, staged first, and hands it to `f` borrowed: what `f` keeps of it (a
    /// decoded state, a seq) is all that is copied. `f` must not use the view.
    ///
    /// # Errors
    /// A storage error.
    pub fn get_with<R>(
        &self,
        ks: Keyspace,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        if let Some(&i) = self.keys[ks_index(ks)].get(key) {
            return Ok(f(self.slots[i].as_deref()));
        }
        if let Some(v) = self.read.borrow()[ks_index(ks)].get(key) {
            return Ok(f(v.as_deref()));
        }
        let v = self.base.get(ks, key)?;
        self.read_bytes
            .set(self.read_bytes.get() + key.len() + v.as_ref().map_or(0, Vec::len));
        let r = f(v.as_deref());
        self.read.borrow_mut()[ks_index(ks)].insert(key.to_vec(), v);
        Ok(r)
    }

    fn set(&mut self, ks: Keyspace, key: Vec<u8>, value: Staged) {
        self.staged_bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        // One hash of the key, whether it is staged already or not.
        match self.keys[ks_index(ks)].entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let i = *e.get();
                let old = std::mem::replace(&mut self.slots[i], value);
                self.log(Undo::Was(i, old));
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let i = self.slots.len();
                e.insert(i);
                self.slots.push(value);
                self.log(Undo::Created(i));
            }
        }
    }

    /// The slot of a key, staged first: a key not staged yet gets a slot holding its value in
    /// the base (a read), which the caller then changes.
    fn slot_of(&mut self, ks: Keyspace, key: &[u8]) -> Result<usize> {
        if let Some(&i) = self.keys[ks_index(ks)].get(key) {
            return Ok(i);
        }
        let value = match self.read.get_mut()[ks_index(ks)].remove(key) {
            Some(v) => v,
            None => self.base.get(ks, key)?,
        };
        let i = self.slots.len();
        self.slots.push(value);
        self.keys[ks_index(ks)].insert(key.to_vec(), i);
        self.log(Undo::Created(i));
        Ok(i)
    }

    /// Stages `bytes` appended to the value of `key` (an absent value is empty) and returns
    /// the value after. The staged value grows in place: no copy of what it held, and the undo
    /// step is its length, so a tile that gets one hash per record costs one hash per record.
    ///
    /// # Errors
    /// A storage error reading the base.
    pub fn append(&mut self, ks: Keyspace, key: &[u8], bytes: &[u8]) -> Result<&[u8]> {
        let i = self.slot_of(ks, key)?;
        self.staged_bytes += bytes.len();
        let step = match &mut self.slots[i] {
            Some(v) => {
                let len = v.len();
                v.extend_from_slice(bytes);
                Undo::Truncated(i, len)
            }
            empty @ None => {
                *empty = Some(bytes.to_vec());
                Undo::Was(i, None)
            }
        };
        self.log(step);
        Ok(self.slots[i].as_deref().unwrap_or_default())
    }

    /// Stages the change `f` makes to the value of `key` (`None`: absent or deleted), in
    /// place; the undo step keeps a copy of the value before, so this is for small values.
    ///
    /// # Errors
    /// A storage error reading the base.
    pub fn update<R>(
        &mut self,
        ks: Keyspace,
        key: &[u8],
        f: impl FnOnce(&mut Option<Vec<u8>>) -> R,
    ) -> Result<R> {
        let i = self.slot_of(ks, key)?;
        if self.keep_undo {
            self.undo.push(Undo::Was(i, self.slots[i].clone()));
        }
        let r = f(&mut self.slots[i]);
        self.staged_bytes += key.len() + self.slots[i].as_ref().map_or(0, Vec::len);
        Ok(r)
    }

    /// Stages a put.
    pub fn put(&mut self, ks: Keyspace, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.set(ks, key.into(), Some(value.into()));
    }

    /// Stages a delete.
    pub fn delete(&mut self, ks: Keyspace, key: impl Into<Vec<u8>>) {
        self.set(ks, key.into(), None);
    }

    /// The view, keeping no undo log from now on: for a view that is never rolled back (a
    /// derivation from records already in order), which then copies no value before changing
    /// it. [`View::rollback`] must not be called on it.
    pub fn without_undo(mut self) -> View<'a> {
        self.keep_undo = false;
        self.undo = Vec::new();
        self
    }

    /// Logs an undo step, when the view keeps them.
    fn log(&mut self, step: Undo) {
        if self.keep_undo {
            self.undo.push(step);
        }
    }

    /// A savepoint to roll back to.
    pub fn savepoint(&self) -> usize {
        self.undo.len()
    }

    /// Undoes everything staged since `sp`. Slots are created in order, so the ones created
    /// since `sp` are the last ones: they are dropped, and their keys with them (a scan of
    /// the maps, paid only by an operation that is undone).
    pub fn rollback(&mut self, sp: usize) {
        debug_assert!(self.keep_undo, "a view without an undo log was rolled back");
        let mut keep = self.slots.len();
        while self.undo.len() > sp {
            match self.undo.pop() {
                Some(Undo::Was(i, old)) => self.slots[i] = old,
                Some(Undo::Created(i)) => keep = keep.min(i),
                Some(Undo::Truncated(i, len)) => {
                    if let Some(v) = &mut self.slots[i] {
                        v.truncate(len);
                    }
                }
                None => break,
            }
        }
        if keep < self.slots.len() {
            self.slots.truncate(keep);
            for map in &mut self.keys {
                map.retain(|_, i| *i < keep);
            }
        }
    }

    /// Drops the undo log: nothing staged so far can be rolled back any more. A view that
    /// keeps an undo log and lives across many batches calls it after each, so the log does
    /// not grow with what it stages (`verify`'s derivation keeps none: [`View::without_undo`]).
    pub fn forget_undo(&mut self) {
        self.undo.clear();
    }

    /// True when nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Number of staged puts and deletes.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of keys and values staged since the view was made or last taken: every put,
    /// append and update counted when made, none taken off, and every value read from the
    /// base with its key, so at least what the view holds.
    pub fn staged_bytes(&self) -> usize {
        self.staged_bytes + self.read_bytes.get()
    }

    /// Takes the staged writes as the changes of one commit, leaving the view empty.
    pub fn take(&mut self) -> Changes {
        self.undo.clear();
        self.staged_bytes = 0;
        // What is taken is about to change the base: nothing read from it before holds.
        for map in self.read.get_mut() {
            map.clear();
        }
        self.read_bytes.set(0);
        let mut slots = std::mem::take(&mut self.slots);
        let mut ops = Vec::with_capacity(slots.len());
        let mut entries: Vec<(Vec<u8>, Staged)> = Vec::new();
        let mut order = Vec::new();
        for (n, map) in self.keys.iter_mut().enumerate() {
            let ks = Keyspace::ALL[n];
            // A map's keys are distinct: sorting them alone, keyspace by keyspace (in
            // keyspace order), gives the changes' order without comparing keyspaces.
            entries.clear();
            entries.extend(map.drain().map(|(k, i)| (k, slots[i].take())));
            order.clear();
            order.extend(
                entries
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| Sortable::new(k, i)),
            );
            sort_keys(&mut order, &entries);
            ops.extend(order.iter().map(|o| {
                let (k, v) = &mut entries[o.index];
                (ks, std::mem::take(k), v.take())
            }));
        }
        Changes::from_sorted(ops)
    }

    /// The state the view reads through.
    pub fn base(&self) -> &'a dyn Read {
        self.base
    }
}

/// A key to sort, by its first 16 bytes as two big-endian integers, zero-padded, and its
/// place among the keys. Two keys whose prefixes differ are in the order of their prefixes (a
/// shorter key padded where the other has a byte is either smaller there, or equal and then a
/// prefix of the other), so a sort that compares the prefixes first reads the keys' bytes
/// only on a tie.
#[derive(Debug, Clone, Copy)]
struct Sortable {
    high: u64,
    low: u64,
    index: usize,
}

impl Sortable {
    fn new(key: &[u8], index: usize) -> Sortable {
        let mut b = [0u8; 16];
        let n = key.len().min(16);
        b[..n].copy_from_slice(&key[..n]);
        let prefix = u128::from_be_bytes(b);
        Sortable {
            high: (prefix >> 64) as u64,
            low: prefix as u64,
            index,
        }
    }
}

/// Sorts `order` (one [`Sortable`] per entry of `entries`, whose keys are distinct) into the
/// keys' byte order. Most of a batch's keys differ in their first 16 bytes (seqs, hashes,
/// request ids), so most comparisons are of integers side by side, and the sort moves 24
/// bytes an entry instead of the entries: sorting the entries by their keys was about a tenth
/// of `verify`'s deriving thread, most of it `memcmp` through pointers.
fn sort_keys<V>(order: &mut [Sortable], entries: &[(Vec<u8>, V)]) {
    order.sort_unstable_by(|a, b| {
        (a.high, a.low)
            .cmp(&(b.high, b.low))
            .then_with(|| entries[a.index].0.cmp(&entries[b.index].0))
    });
}

/// Tree nodes from the tiles of the `nodes` keyspace of any read ([`crate::format::tile`]):
/// each tile is read and its interior computed at most once while the reader lives, so one
/// reader should serve every proof of one answer (an export's records share their top tiles).
pub struct Nodes<'a>(TileNodes<Tiles<'a>>);

impl<'a> Nodes<'a> {
    /// A reader of the tree stored in `read`.
    pub fn new(read: &'a dyn Read) -> Nodes<'a> {
        Nodes(TileNodes::new(Tiles(read)))
    }
}

/// The tiles of the `nodes` keyspace of a read.
pub struct Tiles<'a>(&'a dyn Read);

impl TileSource for Tiles<'_> {
    type Error = Error;
    fn tile(&self, level: u32, index: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(Keyspace::Nodes, &tile_key(level, index))?)
    }
}

impl TileAppend for View<'_> {
    type Error = Error;
    fn append(&mut self, level: u32, index: u64, hash: &Hash) -> Result<&[u8]> {
        View::append(self, Keyspace::Nodes, &tile_key(level, index), hash)
    }
}

impl TileSource for View<'_> {
    type Error = Error;
    fn tile(&self, level: u32, index: u64) -> Result<Option<Vec<u8>>> {
        self.get(Keyspace::Nodes, &tile_key(level, index))
    }
}

/// A tile that cannot be read or extended as an error: the source's own, or `corrupt_store`
/// naming the tile.
pub fn tile_error(e: TileError<Error>) -> Error {
    match e {
        TileError::Source(e) => e,
        other => Error::corrupt(other.to_string()),
    }
}

/// Nodes of the tree as a batch leaves it. Each call reads its tile afresh (no cache): for an
/// occasional root or proof over staged state; the writer folds its checkpoint's root from the
/// frontier ([`super::frontier`]) instead.
impl NodeSource for View<'_> {
    type Error = Error;
    fn node(&self, level: u32, index: u64) -> Result<Hash> {
        TileNodes::new(self).node(level, index).map_err(tile_error)
    }
}

impl NodeSource for Nodes<'_> {
    type Error = Error;
    fn node(&self, level: u32, index: u64) -> Result<Hash> {
        self.0.node(level, index).map_err(tile_error)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::storage::{Entry, Scan, StorageError};

    /// The staging this view replaced, kept as the oracle: an ordered map of (keyspace, key)
    /// to the staged value, and an undo log of copied keys.
    /// A staged key of the oracle.
    type Key = (Keyspace, Vec<u8>);

    #[derive(Default)]
    struct Oracle {
        staged: BTreeMap<Key, Staged>,
        undo: Vec<(Key, Option<Staged>)>,
    }

    impl Oracle {
        fn get(&self, base: &dyn Read, ks: Keyspace, key: &[u8]) -> Option<Vec<u8>> {
            match self.staged.get(&(ks, key.to_vec())) {
                Some(v) => v.clone(),
                None => base.get(ks, key).unwrap(),
            }
        }
        fn set(&mut self, ks: Keyspace, key: Vec<u8>, value: Staged) {
            let k = (ks, key);
            let old = self.staged.insert(k.clone(), value);
            self.undo.push((k, old));
        }
        fn rollback(&mut self, sp: usize) {
            while self.undo.len() > sp {
                let (k, old) = self.undo.pop().unwrap();
                match old {
                    Some(v) => {
                        self.staged.insert(k, v);
                    }
                    None => {
                        self.staged.remove(&k);
                    }
                }
            }
        }
        fn take(&mut self) -> Changes {
            self.undo.clear();
            let mut c = Changes::new();
            for ((ks, k), v) in std::mem::take(&mut self.staged) {
                match v {
                    Some(v) => c.put(ks, k, v),
                    None => c.delete(ks, k),
                }
            }
            c
        }
    }

    /// A base that the taken changes are committed to, read live (as `verify`'s runs are).
    #[derive(Default)]
    struct Live(std::cell::RefCell<BTreeMap<Key, Vec<u8>>>);

    impl Live {
        /// A base with keys of its own in every keyspace the steps use.
        fn seeded() -> Live {
            let live = Live::default();
            for (s, ks) in SPACES.iter().enumerate() {
                for k in (0..8u8).step_by(2 + s) {
                    live.0.borrow_mut().insert((*ks, vec![k]), vec![100 + k]);
                }
            }
            live
        }

        fn commit(&self, c: &Changes) {
            let mut m = self.0.borrow_mut();
            for (ks, key, value) in c.iter() {
                match value {
                    Some(v) => m.insert((ks, key.to_vec()), v.to_vec()),
                    None => m.remove(&(ks, key.to_vec())),
                };
            }
        }
    }

    impl Read for Live {
        fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
            Ok(self.0.borrow().get(&(ks, key.to_vec())).cloned())
        }
        fn scan<'b>(&'b self, ks: Keyspace, start: &[u8]) -> Scan<'b> {
            let entries: Vec<_> = self
                .0
                .borrow()
                .range((ks, start.to_vec())..)
                .take_while(|((k, _), _)| *k == ks)
                .map(|((_, k), v)| Ok((k.clone(), v.clone())))
                .collect();
            Box::new(entries.into_iter())
        }
        fn last(&self, ks: Keyspace) -> Result<Option<Entry>, StorageError> {
            Ok(self
                .0
                .borrow()
                .iter()
                .rfind(|((k, _), _)| *k == ks)
                .map(|((_, k), v)| (k.clone(), v.clone())))
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Put(usize, u8, u8),
        Delete(usize, u8),
        Get(usize, u8),
        /// Append one byte.
        Append(usize, u8, u8),
        /// Update in place: a byte of 0 deletes; any other is pushed onto the value, or becomes
        /// it when there is none.
        Update(usize, u8, u8),
        Savepoint,
        /// Roll back to the n-th savepoint from the top (modulo those open).
        Rollback(usize),
        Take,
    }

    /// Three keyspaces, eight keys: enough for every collision of key, keyspace and slot.
    const SPACES: [Keyspace; 3] = [Keyspace::Meta, Keyspace::Requests, Keyspace::Facts];

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..3usize, 0..8u8, any::<u8>()).prop_map(|(s, k, v)| Step::Put(s, k, v)),
            2 => (0..3usize, 0..8u8).prop_map(|(s, k)| Step::Delete(s, k)),
            3 => (0..3usize, 0..8u8, any::<u8>()).prop_map(|(s, k, v)| Step::Append(s, k, v)),
            2 => (0..3usize, 0..8u8, 0..3u8).prop_map(|(s, k, v)| Step::Update(s, k, v)),
            4 => (0..3usize, 0..8u8).prop_map(|(s, k)| Step::Get(s, k)),
            1 => Just(Step::Savepoint),
            1 => (0..4usize).prop_map(Step::Rollback),
            1 => Just(Step::Take),
        ]
    }

    /// A view sized by a batch that staged and read far more keys than usual starts the next
    /// one with at most `MAX_CAPACITY` keys of room a keyspace: one large batch does not make
    /// every later one hold that much memory.
    #[test]
    fn the_room_a_view_starts_with_is_bounded() {
        let live = Live::default();
        let mut big = View::new(&live);
        for n in 0..(3 * MAX_CAPACITY as u32) {
            big.put(Keyspace::Requests, n.to_be_bytes().to_vec(), vec![1]);
            big.get(Keyspace::Facts, &n.to_be_bytes()).unwrap();
        }
        let used = big.capacity_used();
        assert_eq!(used.staged[ks_index(Keyspace::Requests)], 3 * MAX_CAPACITY);
        assert_eq!(used.read[ks_index(Keyspace::Facts)], 3 * MAX_CAPACITY);
        let next = View::with_capacity(&live, &used);
        assert!(next.keys[ks_index(Keyspace::Requests)].capacity() < 2 * MAX_CAPACITY);
        assert!(next.read.borrow()[ks_index(Keyspace::Facts)].capacity() < 2 * MAX_CAPACITY);
        assert!(next.slots.capacity() < 2 * MAX_CAPACITY);
        // An ordinary batch's room is what it used.
        let small = View::with_capacity(&live, &Capacity::default());
        assert!(small.keys.iter().all(|m| m.capacity() == 0));
    }

    #[test]
    fn keyspaces_are_numbered_in_the_order_of_all() {
        for (n, ks) in Keyspace::ALL.iter().enumerate() {
            assert_eq!(ks_index(*ks), n, "{ks:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Keys sorted by prefix, then bytes, are in byte order: keys of up to 40 bytes of a
        /// small alphabet (zeros and 0xff among them), so they share prefixes, tie on them,
        /// and are prefixes of one another past the 16 bytes and within them.
        #[test]
        fn keys_sorted_by_prefix_are_in_byte_order(
            keys in proptest::collection::btree_set(
                proptest::collection::vec(prop::sample::select(vec![0u8, 1, 0x61, 0xff]), 0..40),
                0..60,
            )
        ) {
            let entries: Vec<(Vec<u8>, ())> = keys.iter().rev().map(|k| (k.clone(), ())).collect();
            let mut order: Vec<Sortable> =
                entries.iter().enumerate().map(|(i, (k, _))| Sortable::new(k, i)).collect();
            sort_keys(&mut order, &entries);
            let sorted: Vec<&Vec<u8>> = order.iter().map(|o| &entries[o.index].0).collect();
            let expected: Vec<&Vec<u8>> = keys.iter().collect();
            prop_assert_eq!(sorted, expected);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every read, every length and every batch taken equal the ordered map's, over
        /// a base with keys of its own, through savepoints and rollbacks.
        #[test]
        fn the_view_stages_exactly_as_the_ordered_map_did(
            steps in proptest::collection::vec(step(), 1..80),
        ) {
            let live = Live::seeded();
            let snap = &live;
            let mut view = View::new(snap);
            let mut oracle = Oracle::default();
            let mut savepoints: Vec<(usize, usize)> = Vec::new();
            for st in steps {
                match st {
                    Step::Put(s, k, v) => {
                        view.put(SPACES[s], vec![k], vec![v]);
                        oracle.set(SPACES[s], vec![k], Some(vec![v]));
                    }
                    Step::Delete(s, k) => {
                        view.delete(SPACES[s], vec![k]);
                        oracle.set(SPACES[s], vec![k], None);
                    }
                    Step::Append(s, k, v) => {
                        let after = view.append(SPACES[s], &[k], &[v]).unwrap().to_vec();
                        let mut expected =
                            oracle.get(snap, SPACES[s], &[k]).unwrap_or_default();
                        expected.push(v);
                        prop_assert_eq!(&after, &expected);
                        oracle.set(SPACES[s], vec![k], Some(expected));
                    }
                    Step::Update(s, k, v) => {
                        let change = |value: &mut Option<Vec<u8>>| match (v, value.as_mut()) {
                            (0, _) => *value = None,
                            (_, Some(bytes)) => bytes.push(v),
                            (_, None) => *value = Some(vec![v]),
                        };
                        view.update(SPACES[s], &[k], change).unwrap();
                        let mut expected = oracle.get(snap, SPACES[s], &[k]);
                        change(&mut expected);
                        oracle.set(SPACES[s], vec![k], expected);
                    }
                    Step::Get(s, k) => {
                        prop_assert_eq!(
                            view.get(SPACES[s], &[k]).unwrap(),
                            oracle.get(snap, SPACES[s], &[k])
                        );
                    }
                    Step::Savepoint => savepoints.push((view.savepoint(), oracle.undo.len())),
                    Step::Rollback(n) => {
                        if !savepoints.is_empty() {
                            let keep = savepoints.len() - 1 - n % savepoints.len();
                            let (sv, so) = savepoints[keep];
                            savepoints.truncate(keep);
                            view.rollback(sv);
                            oracle.rollback(so);
                        }
                    }
                    Step::Take => {
                        // What is taken is committed to the base, as every caller does:
                        // what the view read of the base before must not be answered again.
                        savepoints.clear();
                        let taken = view.take();
                        prop_assert_eq!(&taken, &oracle.take());
                        live.commit(&taken);
                    }
                }
                prop_assert_eq!(view.len(), oracle.staged.len());
                prop_assert_eq!(view.is_empty(), oracle.staged.is_empty());
            }
            prop_assert_eq!(view.take(), oracle.take());
        }

        /// A view without an undo log stages, reads and takes exactly what one with it does,
        /// and logs nothing (savepoints and rollbacks left out: it is never rolled back).
        #[test]
        fn a_view_without_undo_stages_as_one_with_it(
            steps in proptest::collection::vec(step(), 1..80),
        ) {
            let live = Live::seeded();
            let mut with = View::new(&live);
            let mut without = View::new(&live).without_undo();
            for st in steps {
                for view in [&mut with, &mut without] {
                    match st {
                        Step::Put(s, k, v) => view.put(SPACES[s], vec![k], vec![v]),
                        Step::Delete(s, k) => view.delete(SPACES[s], vec![k]),
                        Step::Append(s, k, v) => {
                            view.append(SPACES[s], &[k], &[v]).unwrap();
                        }
                        Step::Update(s, k, v) => {
                            view.update(SPACES[s], &[k], |value| match (v, value.as_mut()) {
                                (0, _) => *value = None,
                                (_, Some(bytes)) => bytes.push(v),
                                (_, None) => *value = Some(vec![v]),
                            })
                            .unwrap();
                        }
                        Step::Get(..) | Step::Savepoint | Step::Rollback(_) | Step::Take => {}
                    }
                }
                if let Step::Get(s, k) = st {
                    prop_assert_eq!(
                        without.get(SPACES[s], &[k]).unwrap(),
                        with.get(SPACES[s], &[k]).unwrap()
                    );
                }
                prop_assert_eq!(without.len(), with.len());
                prop_assert_eq!(without.undo.len(), 0);
            }
            prop_assert_eq!(without.take(), with.take());
        }
    }
}
