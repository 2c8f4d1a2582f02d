//! A loaded transform: validated, compiled and pre-instantiated.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::bindings::GuestPre;
use super::check::ComponentDescription;

/// A component of the `weir:transform@0.2.x` or `@0.1.x` world, ready to instantiate.
///
/// Made by [`super::WasmEngine::load`]; shared (`Arc`) by all operators that run it.
pub struct TransformComponent {
    path: PathBuf,
    size: u64,
    sha256: String,
    description: ComponentDescription,
    pub(crate) pre: GuestPre,
}

impl TransformComponent {
    pub(crate) fn new(path: &Path, bytes: &[u8], description: ComponentDescription, pre: GuestPre) -> Self {
        let sha256 = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
        Self { path: path.to_owned(), size: bytes.len() as u64, sha256, description, pre }
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the component file, 64 lowercase hex digits: which build of a transform runs.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Size of the component file, in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its imports and exports.
    pub fn description(&self) -> &ComponentDescription {
        &self.description
    }
}
