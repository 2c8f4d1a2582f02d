//! On-disk cache of compiled components, keyed by content hash and engine compatibility, and
//! bounded in size: least recently used entries go first.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Default bound of the cache: 2 GiB, some fifty compiled Python components (about 37 MB each
/// with wasmtime 48) or thousands of Rust ones.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 2 << 30;

/// A directory of `.cwasm` files, one per (component bytes, engine settings) pair, holding at
/// most `max_bytes` of them (an entry larger than that alone is still kept).
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl ComponentCache {
    pub(crate) fn new(dir: PathBuf, max_bytes: u64) -> Self {
        Self { dir, max_bytes }
    }

    /// The cache file for `bytes` compiled by `engine`: SHA-256 over the bytes and the engine's
    /// `precompile_compatibility_hash` (wasmtime version, target and codegen settings), so a
    /// new wasmtime or other settings never load a stale artifact.
    pub(crate) fn path_for(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.update(bytes);
        let digest = hasher.0.finalize();
        let name: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.cwasm"))
    }

    /// Loads a cached compilation; `None` when missing or unusable (it is then recompiled).
    pub(crate) fn load(&self, engine: &Engine, path: &Path) -> Option<Component> {
        if !path.exists() {
            return None;
        }
        // SAFETY: the cache directory holds only artifacts this host serialised itself (written
        // to a temporary file and renamed into place), and the key covers the engine's
        // compatibility hash; wasmtime still checks the artifact's header and version.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => {
                // The modification time is the entry's last use, for eviction. Best effort: a
                // read-only cache still serves, it just evicts by age of writing.
                let _ = std::fs::File::options().write(true).open(path).and_then(|f| f.set_modified(SystemTime::now()));
                Some(component)
            }
            // Another process evicted it since `exists`: an ordinary miss.
            Err(_) if !path.exists() => None,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring unusable compiled-component cache entry");
                None
            }
        }
    }

    /// Stores a compilation, first evicting others to make room for it within the bound;
    /// failures only cost a recompilation later, so they are logged.
    pub(crate) fn store(&self, path: &Path, component: &Component) {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let result = (|| -> Result<(), Box<dyn std::error::Error>> {
            std::fs::create_dir_all(&self.dir)?;
            let bytes = component.serialize().map_err(|e| e.to_string())?;
            // Room first, so that a cache at its bound on a full disk still takes new entries.
            self.evict(path, bytes.len() as u64);
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, path)?;
            Ok(())
        })();
        if let Err(error) = result {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(dir = %self.dir.display(), %error, "cannot write the compiled-component cache");
        }
    }

    /// Removes the least recently used entries (oldest modification time first) until the
    /// cache holds at most `max_bytes` with `incoming` bytes more for `keep`, which is never
    /// removed; and temporary files of writes that died more than an hour ago. Removing an
    /// entry another process has mapped is safe: the mapping outlives the name. An entry that
    /// cannot be removed is logged and skipped.
    fn evict(&self, keep: &Path, incoming: u64) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return };
        let stale = SystemTime::now() - STALE_WRITE;
        let mut entries = Vec::new();
        let mut total = incoming;
        for entry in dir.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
            // Dead writes sort first and go whatever the total; then the least recently used.
            if extension.starts_with("tmp") && modified < stale {
                entries.push((false, modified, meta.len(), path));
            } else if extension == "cwasm" && path != keep {
                entries.push((true, modified, meta.len(), path));
            } else {
                continue;
            }
            total += meta.len();
        }
        entries.sort();
        let mut evicted = 0;
        for (live, _, len, path) in entries {
            if total <= self.max_bytes && live {
                break;
            }
            match std::fs::remove_file(&path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(path = %path.display(), %error, "cannot evict a compiled-component cache entry");
                }
                _ => {
                    total -= len;
                    evicted += 1;
                }
            }
        }
        if evicted > 0 {
            tracing::info!(dir = %self.dir.display(), evicted, bytes = total, max_bytes = self.max_bytes, "evicted least recently used compiled components");
        }
    }
}

/// How old a temporary file of the cache must be to count as left by a write that died.
const STALE_WRITE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Parses a cache bound given in MiB (`WEIR_CACHE_MAX_MB`, `compiled_cache_max_mb`): 1 to
/// 2^30 MiB; the error says what is expected.
pub fn parse_cache_max_mb(mb: u64) -> Result<u64, String> {
    if (1..=1 << 30).contains(&mb) { Ok(mb << 20) } else { Err(format!("must be 1 to 1073741824 (MiB), got {mb}")) }
}

/// Feeds `Hash` output into SHA-256, for a hash that is stable across processes.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0 // never consulted: the digest is read from the inner SHA-256
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Writes `name.cwasm` of `len` bytes, last used `age_s` seconds ago.
    fn entry(dir: &Path, name: &str, len: usize, age_s: u64) -> PathBuf {
        let path = dir.join(format!("{name}.cwasm"));
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let at = SystemTime::now() - Duration::from_secs(age_s);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(at).unwrap();
        path
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn eviction_removes_least_recently_used_entries_down_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().to_owned(), 300);
        entry(dir.path(), "old", 100, 300);
        entry(dir.path(), "used", 100, 100);
        entry(dir.path(), "older", 100, 400);
        std::fs::write(dir.path().join("notes.txt"), vec![0u8; 1000]).unwrap();
        let new = dir.path().join("new.cwasm");
        cache.evict(&new, 150);
        // 450 bytes with the new entry: the two least recently used go, the other files stay.
        assert_eq!(names(dir.path()), ["notes.txt", "used.cwasm"]);
    }

    #[test]
    fn temporary_files_of_dead_writes_go_and_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().to_owned(), 1 << 20);
        let dead = dir.path().join("a.tmp123");
        std::fs::write(&dead, b"partial").unwrap();
        let at = SystemTime::now() - Duration::from_secs(7200);
        std::fs::File::options().write(true).open(&dead).unwrap().set_modified(at).unwrap();
        std::fs::write(dir.path().join("b.tmp456"), b"being written").unwrap();
        entry(dir.path(), "c", 10, 10);
        cache.evict(&dir.path().join("d.cwasm"), 10);
        assert_eq!(names(dir.path()), ["b.tmp456", "c.cwasm"]);
    }

    #[test]
    fn an_entry_larger_than_the_bound_is_kept_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().to_owned(), 100);
        entry(dir.path(), "a", 50, 10);
        cache.evict(&dir.path().join("big.cwasm"), 500);
        assert!(names(dir.path()).is_empty(), "everything else makes room");
    }
}
