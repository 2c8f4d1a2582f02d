//! The guest SDKs (WIT, SDK sources, templates, build scripts) compiled into `weir`, so that a
//! copied or installed binary can `transform init/build/test` with no checkout beside it.
//!
//! On first use they are written out under the cache directory, into a folder named for this
//! Weir version and a hash of the embedded files (`<cache>/sdk/<version>-<hash>/`), so two Weir
//! versions (or two builds of one) on a machine never mix. The folder mirrors the repository's
//! layout, `guest-sdk/…` beside `scripts/setup.sh`, because the build scripts source the latter
//! through `guest-sdk/<lang>/../../scripts/setup.sh`. `$WEIR_SDK_DIR` (a `guest-sdk` folder)
//! overrides all of this, for developing the SDKs without rebuilding `weir`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rust_embed::{Embed, EmbeddedFile};
use sha2::{Digest, Sha256};

/// `guest-sdk/`, without what builds and tests leave in it (npm packages, Python caches, locks).
#[derive(Embed)]
#[folder = "../guest-sdk/"]
#[prefix = "guest-sdk/"]
#[exclude = "**/node_modules/**"]
#[exclude = "**/__pycache__/**"]
#[exclude = "**/.pytest_cache/**"]
#[exclude = "**/target/**"]
#[exclude = "**/.install.lock"]
struct GuestSdk;

/// The one machine set-up the build scripts source (installs their toolchains when missing).
#[derive(Embed)]
#[folder = "../scripts/"]
#[prefix = "scripts/"]
#[include = "setup.sh"]
struct SetupScript;

/// The environment variable naming a `guest-sdk` folder to use instead of the embedded one.
pub const SDK_DIR_ENV: &str = "WEIR_SDK_DIR";

/// The guest SDK folder (`…/guest-sdk`, holding `wit/`, `templates/` and one folder per
/// language): `$WEIR_SDK_DIR` when set, else the embedded SDK, written out under the cache
/// directory on first use.
///
/// # Errors
/// When `$WEIR_SDK_DIR` has no `wit/` folder, when no cache directory is known (no `$HOME`), or
/// when the SDK cannot be written there (the message names the folder).
pub fn sdk_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os(SDK_DIR_ENV).filter(|v| !v.is_empty()).map(PathBuf::from) {
        if !dir.join("wit").is_dir() {
            bail!(
                "{SDK_DIR_ENV}={} is not a guest-sdk folder (it has no wit/): unset it to use the SDK built into weir",
                dir.display()
            );
        }
        return Ok(dir.canonicalize()?);
    }
    let root = weir::cache_root()
        .context("no cache directory for the guest SDK: set HOME, XDG_CACHE_HOME or WEIR_CACHE_DIR")?
        .join("sdk")
        .join(format!("{}-{}", env!("CARGO_PKG_VERSION"), &embedded_hash()[..12]));
    if !root.join(COMPLETE).is_file() {
        write_out(&root).with_context(|| format!("writing the guest SDK into {}", root.display()))?;
    }
    Ok(root.join("guest-sdk"))
}

/// Written last into a finished folder: a folder without it was interrupted and is redone.
const COMPLETE: &str = ".complete";

/// Every embedded file: its path below the SDK folder's root, and its contents.
fn embedded() -> impl Iterator<Item = (Cow<'static, str>, EmbeddedFile)> {
    let sdk = GuestSdk::iter().filter_map(|path| GuestSdk::get(&path).map(|file| (path, file)));
    let setup = SetupScript::iter().filter_map(|path| SetupScript::get(&path).map(|file| (path, file)));
    sdk.chain(setup)
}

/// A hash of every embedded file's path and contents, in path order.
fn embedded_hash() -> String {
    let mut files: Vec<_> = embedded().map(|(path, file)| (path, file.metadata.sha256_hash())).collect();
    files.sort();
    let mut hash = Sha256::new();
    for (path, contents) in files {
        hash.update(path.as_bytes());
        hash.update([0]);
        hash.update(contents);
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes every embedded file below `root` (through a temporary sibling folder renamed into
/// place, so that two processes writing at once both end with one whole folder).
fn write_out(root: &Path) -> anyhow::Result<()> {
    let parent = root.parent().context("SDK folder without parent")?;
    std::fs::create_dir_all(parent)?;
    let staging = tempfile::Builder::new().prefix(".sdk-").tempdir_in(parent)?;
    for (path, file) in embedded() {
        let target = staging.path().join(&*path);
        std::fs::create_dir_all(target.parent().context("embedded file without folder")?)?;
        std::fs::write(&target, &file.data)?;
        if path.ends_with(".sh") {
            // The build scripts are run directly (`#!/usr/bin/env bash`); git's modes are not embedded.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    std::fs::write(staging.path().join(COMPLETE), "")?;
    if root.is_dir() && !root.join(COMPLETE).is_file() {
        // Left incomplete (its marker deleted, say): replace it whole.
        std::fs::remove_dir_all(root)?;
    }
    let staged = staging.keep();
    match std::fs::rename(&staged, root) {
        Ok(()) => Ok(()),
        // Another process finished the same folder first: keep its copy.
        Err(_) if root.join(COMPLETE).is_file() => {
            let _ = std::fs::remove_dir_all(&staged);
            Ok(())
        }
        Err(error) => {
            let _ = std::fs::remove_dir_all(&staged);
            Err(error.into())
        }
    }
}
