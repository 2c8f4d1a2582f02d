use std::collections::BTreeMap;

use super::{Entries, StateError, StateStore};

/// An in-memory [`StateStore`]: a sorted map, lost when dropped.
///
/// For local runs and tests; pipelines use the RocksDB backend.
#[derive(Debug, Default, Clone)]
pub struct MemoryState {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl MemoryState {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl StateStore for MemoryState {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.entries.get(key).cloned())
    }

    fn write(&mut self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StateError> {
        for (key, value) in writes {
            match value {
                Some(value) => self.entries.insert(key, value),
                None => self.entries.remove(&key),
            };
        }
        Ok(())
    }

    fn scan_prefix(&mut self, prefix: &[u8], limit: usize) -> Result<Entries, StateError> {
        Ok(self
            .entries
            .range(prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .take(limit)
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_prefix_is_ordered_bounded_and_exact() {
        let mut state = MemoryState::new();
        let writes = ["a|2", "a|1", "b|1", "a|3", "a"]
            .iter()
            .map(|k| (k.as_bytes().to_vec(), Some(k.as_bytes().to_vec())))
            .collect();
        state.write(writes).unwrap();
        let keys: Vec<_> = state.scan_prefix(b"a|", 2).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"a|1".to_vec(), b"a|2".to_vec()]);
        state.write(vec![(b"a|1".to_vec(), None)]).unwrap();
        assert_eq!(state.get(b"a|1").unwrap(), None);
        assert_eq!(state.len(), 4);
    }
}
