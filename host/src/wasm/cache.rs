//! On-disk cache of compiled components, keyed by content hash and engine compatibility.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of `.cwasm` files, one per (component bytes, engine settings) pair.
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir }
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
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring unusable compiled-component cache entry");
                None
            }
        }
    }

    /// Stores a compilation; failures only cost a recompilation later, so they are logged.
    pub(crate) fn store(&self, path: &Path, component: &Component) {
        let result = (|| -> Result<(), Box<dyn std::error::Error>> {
            std::fs::create_dir_all(&self.dir)?;
            let bytes = component.serialize().map_err(|e| e.to_string())?;
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, path)?;
            Ok(())
        })();
        if let Err(error) = result {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot write the compiled-component cache");
        }
    }
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
