//! Checks that a file is a component of a `weir:transform` world the host accepts (`0.2.x`, or
//! `0.1.x`).

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::bindings::Version;

/// The contract package this host implements.
pub const CONTRACT_PACKAGE: &str = "weir:transform";
/// Functions every transform exports.
pub const REQUIRED_EXPORTS: [&str; 4] = ["init", "process", "snapshot", "restore"];

/// Why a file is not a component of a `weir:transform` version the host accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The file does not start with the WebAssembly magic bytes.
    #[error("not a WebAssembly file (no `\\0asm` header); build the transform with `weir transform build`")]
    NotWasm,
    /// A core module (WebAssembly 1.0), not a component.
    #[error(
        "a core WebAssembly module, not a component; build for wasm32-wasip2 or wrap it with `wasm-tools component new`"
    )]
    CoreModule,
    /// The file names an unknown WebAssembly binary version or layer.
    #[error("unknown WebAssembly binary version {0:#x}; expected a component (layer 1)")]
    UnknownVersion(u32),
    /// Built against another version of the contract.
    #[error(
        "built against {found}; this Weir accepts weir:transform@0.2.x and @0.1.x: rebuild the transform with a matching SDK"
    )]
    WrongVersion {
        /// The package and version found, e.g. `weir:transform@0.2.0`.
        found: String,
    },
    /// A component of another world.
    #[error("not a weir:transform component: it exports [{}], expected init, process, snapshot and restore", exports.join(", "))]
    OtherWorld {
        /// The names the component exports.
        exports: Vec<String>,
    },
}

/// Checks the binary header: magic, then version 0x0d with layer 1 for components.
///
/// # Errors
/// [`ContractError::NotWasm`], [`ContractError::CoreModule`] or
/// [`ContractError::UnknownVersion`].
pub fn check_header(bytes: &[u8]) -> Result<(), ContractError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(ContractError::NotWasm);
    }
    match u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) {
        1 => Err(ContractError::CoreModule),
        0x0001_000d => Ok(()),
        other => Err(ContractError::UnknownVersion(other)),
    }
}

/// Imports, exports and contract version of a compiled component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentDescription {
    /// Imported names with their kind, e.g. `weir:transform/state@0.1.0 (instance)`.
    pub imports: Vec<String>,
    /// Exported names with their kind, e.g. `process (func)`.
    pub exports: Vec<String>,
    /// The contract version it was built against, e.g. `weir:transform@0.2.0`.
    pub contract: String,
    pub(crate) version: Version,
}

/// Describes `component` and checks it against the contract.
///
/// # Errors
/// [`ContractError::WrongVersion`] when it imports `weir:transform` interfaces of a version
/// other than 0.2.x or 0.1.x, or of two versions (every transform imports
/// `weir:transform/types`), and
/// [`ContractError::OtherWorld`] when it lacks one of [`REQUIRED_EXPORTS`].
pub fn describe_component(engine: &Engine, component: &Component) -> Result<ComponentDescription, ContractError> {
    let ty = component.component_type();
    let imports: Vec<(String, &str)> =
        ty.imports(engine).map(|(name, item)| (name.to_owned(), kind(&item.ty))).collect();
    let exports: Vec<(String, &str)> =
        ty.exports(engine).map(|(name, item)| (name.to_owned(), kind(&item.ty))).collect();

    let mut found: Option<(String, Version)> = None;
    for (name, _) in &imports {
        if let Some(rest) = name.strip_prefix(CONTRACT_PACKAGE).and_then(|r| r.strip_prefix('/')) {
            let version = rest.split_once('@').map(|(_, v)| v).unwrap_or("");
            let wrong = |found: String| Err(ContractError::WrongVersion { found });
            let accepted = if version.starts_with("0.2.") {
                Version::V0_2
            } else if version.starts_with("0.1.") {
                Version::V0_1
            } else {
                return wrong(format!("{CONTRACT_PACKAGE}@{version}"));
            };
            match &found {
                Some((first, seen)) if *seen != accepted => {
                    return wrong(format!("both {CONTRACT_PACKAGE}@{first} and @{version}"));
                }
                _ => found = Some((version.to_owned(), accepted)),
            }
        }
    }
    let exported = |wanted: &str| exports.iter().any(|(name, kind)| name == wanted && *kind == "func");
    if !REQUIRED_EXPORTS.iter().all(|name| exported(name)) {
        return Err(ContractError::OtherWorld { exports: exports.into_iter().map(|(name, _)| name).collect() });
    }
    let label = |items: Vec<(String, &str)>| items.into_iter().map(|(name, kind)| format!("{name} ({kind})")).collect();
    // Every transform imports `types`; one that imports nothing of the package cannot link to
    // either world, and says so against the current one.
    let (contract_version, version) = found.unwrap_or_else(|| ("0.2.0".into(), Version::V0_2));
    Ok(ComponentDescription {
        imports: label(imports),
        exports: label(exports),
        contract: format!("{CONTRACT_PACKAGE}@{contract_version}"),
        version,
    })
}

fn kind(item: &ComponentItem) -> &'static str {
    match item {
        ComponentItem::ComponentFunc(_) => "func",
        ComponentItem::CoreFunc(_) => "core func",
        ComponentItem::Module(_) => "module",
        ComponentItem::Component(_) => "component",
        ComponentItem::ComponentInstance(_) => "instance",
        ComponentItem::Type(_) => "type",
        ComponentItem::Resource(_) => "resource",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_distinguishes_components_modules_and_junk() {
        assert_eq!(check_header(b"\0asm\x0d\0\x01\0rest"), Ok(()));
        assert_eq!(check_header(b"\0asm\x01\0\0\0"), Err(ContractError::CoreModule));
        assert_eq!(check_header(b"PK\x03\x04 zip"), Err(ContractError::NotWasm));
        assert_eq!(check_header(b"\0as"), Err(ContractError::NotWasm));
        assert!(matches!(check_header(b"\0asm\x0e\0\x01\0"), Err(ContractError::UnknownVersion(_))));
    }
}
