//! A loaded transform: validated, compiled and pre-instantiated.

use std::path::{Path, PathBuf};

use super::bindings::GuestPre;
use super::check::ComponentDescription;

/// A component of the `weir:transform@0.2.x` or `@0.1.x` world, ready to instantiate.
///
/// Made by [`super::WasmEngine::load`]; shared (`Arc`) by all operators that run it.
pub struct TransformComponent {
    path: PathBuf,
    size: u64,
    description: ComponentDescription,
    pub(crate) pre: GuestPre,
}

impl TransformComponent {
    pub(crate) fn new(path: &Path, size: u64, description: ComponentDescription, pre: GuestPre) -> Self {
        Self { path: path.to_owned(), size, description, pre }
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
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
