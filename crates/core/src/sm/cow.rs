//! [`CowMap`]: an ordered map whose clone costs O(1), so that a snapshot of the whole state
//! can be taken inside the node's step and encoded on another thread while the node goes on
//! applying entries.
//!
//! The map is a persistent B-tree (`imbl::OrdMap`) of reference-counted values. Cloning it
//! shares every node; a later change copies only the path to the changed key (a few nodes
//! of 16 keys and value pointers) and, through `Arc::make_mut`, the one value it changes —
//! and only while a clone is still alive. Without a live clone every change is in place.
//!
//! It encodes (serde) and hashes exactly as a `BTreeMap<K, V>` with the same contents does,
//! so snapshots written before it existed read back unchanged.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An ordered map with O(1) clone; see the module documentation.
#[derive(Clone, PartialEq, Eq)]
pub struct CowMap<K: Ord + Clone, V> {
    map: imbl::OrdMap<K, Arc<V>>,
}

impl<K: Ord + Clone, V> Default for CowMap<K, V> {
    fn default() -> Self {
        CowMap {
            map: imbl::OrdMap::new(),
        }
    }
}

impl<K: Ord + Clone, V: Clone> CowMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value at `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get(key).map(|v| &**v)
    }

    /// Whether `key` has a value.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.contains_key(key)
    }

    /// The value at `key`, to change; copied first if a clone of the map still shares it.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get_mut(key).map(Arc::make_mut)
    }

    /// The value at `key`, inserting `V::default()` first if there is none.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        Arc::make_mut(self.map.entry(key).or_default())
    }

    /// Sets `key` to `value`; returns the value it had.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.map.insert(key, Arc::new(value)).map(unwrap_or_clone)
    }

    /// Removes `key`; returns the value it had.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.remove(key).map(unwrap_or_clone)
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        self.map.iter().map(|(k, v)| (k, &**v))
    }

    /// Entries whose keys lie in `range`, in key order.
    pub fn range<Q, R>(&self, range: R) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
        R: RangeBounds<Q>,
    {
        self.map.range(range).map(|(k, v)| (k, &**v))
    }
}

fn unwrap_or_clone<V: Clone>(v: Arc<V>) -> V {
    Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone())
}

impl<'a, K: Ord + Clone, V: Clone> IntoIterator for &'a CowMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for CowMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        CowMap {
            map: iter.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
        }
    }
}

impl<K: Ord + Clone + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for CowMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// As `BTreeMap`'s: the length, then each key and value in order.
impl<K: Ord + Clone + Hash, V: Clone + Hash> Hash for CowMap<K, V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.len());
        for (k, v) in self.iter() {
            k.hash(state);
            v.hash(state);
        }
    }
}

impl<K: Ord + Clone + Serialize, V: Clone + Serialize> Serialize for CowMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, K, V> Deserialize<'de> for CowMap<K, V>
where
    K: Ord + Clone + Deserialize<'de>,
    V: Clone + Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<K, V>(PhantomData<(K, V)>);

        impl<'de, K, V> Visitor<'de> for MapVisitor<K, V>
        where
            K: Ord + Clone + Deserialize<'de>,
            V: Clone + Deserialize<'de>,
        {
            type Value = CowMap<K, V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = imbl::OrdMap::new();
                while let Some((k, v)) = access.next_entry::<K, V>()? {
                    // As BTreeMap's decoding: a repeated key keeps the last value.
                    map.insert(k, Arc::new(v));
                }
                Ok(CowMap { map })
            }
        }

        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bincode::Options;

    use super::*;

    fn codec() -> impl Options {
        bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .reject_trailing_bytes()
    }

    fn sample() -> BTreeMap<String, Vec<u64>> {
        (0..300u64)
            .map(|i| (format!("key-{i:04}"), (0..i % 5).collect()))
            .collect()
    }

    #[test]
    fn a_clone_keeps_its_contents_while_the_original_changes() {
        let mut map: CowMap<String, Vec<u64>> = sample().into_iter().collect();
        let frozen = map.clone();
        let before: Vec<_> = frozen.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        map.get_mut("key-0007").unwrap().push(99);
        map.insert("key-9999".into(), vec![1]);
        map.remove("key-0100");
        *map.get_or_default("new".into()) = vec![7];
        let after: Vec<_> = frozen.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(before, after, "the clone saw none of the changes");
        assert_eq!(map.get("key-0007").unwrap().last(), Some(&99));
        assert_eq!(map.len(), frozen.len() + 1);
        assert!(!map.contains_key("key-0100") && frozen.contains_key("key-0100"));
    }

    #[test]
    fn it_encodes_and_hashes_as_a_btreemap_with_the_same_contents() {
        let btree = sample();
        let cow: CowMap<String, Vec<u64>> = btree.clone().into_iter().collect();
        let a = codec().serialize(&btree).unwrap();
        let b = codec().serialize(&cow).unwrap();
        assert_eq!(
            a, b,
            "same bytes: snapshots written before read back unchanged"
        );
        let back: CowMap<String, Vec<u64>> = codec().deserialize(&a).unwrap();
        assert!(back == cow);
        let hash = |h: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            h(&mut hasher);
            hasher.finish()
        };
        assert_eq!(hash(&|h| btree.hash(h)), hash(&|h| cow.hash(h)));
        use std::ops::Bound;
        let range = (Bound::Included("key-0010"), Bound::Excluded("key-0013"));
        let ranged: Vec<_> = cow.range::<str, _>(range).map(|(k, _)| k.clone()).collect();
        assert_eq!(ranged, ["key-0010", "key-0011", "key-0012"]);
    }
}
