//! The process-wide wasmtime engine, its epoch ticker and its linker.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, ProfilingStrategy};

use super::bindings::GuestPre;
use super::cache::{ComponentCache, DEFAULT_CACHE_MAX_BYTES, parse_cache_max_mb};
use super::check::{check_header, describe_component};
use super::component::TransformComponent;
use super::error::LoadError;
use super::host::HostState;

/// Period of the epoch ticker; deadlines are enforced with this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Set to `perfmap` to have compiled guest code named in `/tmp/perf-<pid>.map`, so that
/// `perf record`/`perf report` show guest functions instead of anonymous addresses.
pub const PROFILER_ENV: &str = "WEIR_WASM_PROFILER";

/// The environment variable bounding the compiled-component cache, in MiB.
pub const CACHE_MAX_MB_ENV: &str = "WEIR_CACHE_MAX_MB";

/// Settings of the [`WasmEngine`].
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Directory of the compiled-component cache; `None` disables it. By default
    /// [`EngineConfig::default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
    /// Most bytes the cache holds; past it, storing a compilation removes the least recently
    /// used ones. Default [`DEFAULT_CACHE_MAX_BYTES`] (2 GiB).
    pub cache_max_bytes: u64,
}

/// Weir's cache directory (compiled components, the guest SDK written out by `weir transform`):
/// `$WEIR_CACHE_DIR`, else `$XDG_CACHE_HOME/weir`, else `$HOME/.cache/weir`; `None` when none
/// of these is set.
pub fn cache_root() -> Option<PathBuf> {
    let env = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("WEIR_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("weir")))
        .or_else(|| env("HOME").map(|d| d.join(".cache").join("weir")))
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { cache_dir: None, cache_max_bytes: DEFAULT_CACHE_MAX_BYTES }
    }
}

impl EngineConfig {
    /// `components` in [`cache_root`].
    pub fn default_cache_dir() -> Option<PathBuf> {
        Some(cache_root()?.join("components"))
    }

    /// The default configuration, with the default cache directory, bounded by
    /// `$WEIR_CACHE_MAX_MB` when set.
    ///
    /// # Errors
    /// [`LoadError::Engine`] when `$WEIR_CACHE_MAX_MB` is not a whole number of MiB from 1 to
    /// 2^30.
    pub fn with_default_cache() -> Result<Self, LoadError> {
        let cache_max_bytes = match std::env::var_os(CACHE_MAX_MB_ENV) {
            None => DEFAULT_CACHE_MAX_BYTES,
            Some(raw) => {
                let text = raw.to_string_lossy();
                let parsed = text.trim().parse::<u64>().map_err(|_| "expected a whole number of MiB, e.g. 2048".into());
                parsed
                    .and_then(parse_cache_max_mb)
                    .map_err(|why| LoadError::Engine { reason: format!("{CACHE_MAX_MB_ENV}={text:?}: {why}") })?
            }
        };
        Ok(Self { cache_dir: Self::default_cache_dir(), cache_max_bytes })
    }
}

/// One wasmtime `Engine` (component model, epoch interruption) with the host's linker.
///
/// Cheap to share: clone the `Arc` it is usually held in. A ticker thread advances the engine's
/// epoch every [`EPOCH_TICK`] for as long as the engine lives.
pub struct WasmEngine {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
    cache: Option<ComponentCache>,
}

impl WasmEngine {
    /// Builds the engine and starts its epoch ticker.
    ///
    /// # Errors
    /// [`LoadError::Engine`] when wasmtime rejects the configuration or the linker cannot be
    /// built.
    pub fn new(config: &EngineConfig) -> Result<Self, LoadError> {
        let engine_error = |e: wasmtime::Error| LoadError::Engine { reason: format!("{e:#}") };
        let mut wasmtime_config = Config::new();
        wasmtime_config.wasm_component_model(true).epoch_interruption(true);
        // Weir calls guests synchronously, one call per store at a time; without this, every
        // host call (a state read, say) also creates and deletes a component-model-async task.
        wasmtime_config.concurrency_support(false);
        if std::env::var(PROFILER_ENV).is_ok_and(|v| v == "perfmap") {
            wasmtime_config.profiler(ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&wasmtime_config).map_err(engine_error)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(engine_error)?;
        super::blocking::add_to_linker(&mut linker).map_err(engine_error)?;
        super::bindings::add_to_linker(&mut linker).map_err(engine_error)?;

        let weak = engine.weak();
        std::thread::Builder::new()
            .name("weir-epoch-ticker".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(|e| LoadError::Engine { reason: format!("cannot start the epoch ticker: {e}") })?;

        Ok(Self {
            engine,
            linker: Arc::new(linker),
            cache: config.cache_dir.clone().map(|dir| ComponentCache::new(dir, config.cache_max_bytes)),
        })
    }

    /// The underlying wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Loads, validates and pre-instantiates the component at `path`.
    ///
    /// Compilation is cached on disk; a second load of the same bytes deserialises instead.
    ///
    /// # Errors
    /// [`LoadError::Read`] when the file cannot be read, [`LoadError::Contract`] when it is not
    /// a component of `weir:transform@0.2.x` or `@0.1.x`, [`LoadError::Invalid`] when it does not validate
    /// (a truncated file, say), [`LoadError::Link`] when its imports cannot be satisfied.
    pub fn load(&self, path: &Path) -> Result<TransformComponent, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read { path: path.to_owned(), source })?;
        let contract = |source| LoadError::Contract { path: path.to_owned(), source };
        check_header(&bytes).map_err(contract)?;

        let cached_at = self.cache.as_ref().map(|cache| (cache, cache.path_for(&self.engine, &bytes)));
        let cached = cached_at.as_ref().and_then(|(cache, at)| cache.load(&self.engine, at));
        let component = match cached {
            Some(component) => component,
            None => {
                let component = Component::from_binary(&self.engine, &bytes)
                    .map_err(|e| LoadError::Invalid { path: path.to_owned(), reason: format!("{e:#}") })?;
                if let Some((cache, at)) = &cached_at {
                    cache.store(at, &component);
                }
                component
            }
        };

        let description = describe_component(&self.engine, &component).map_err(contract)?;
        let link = |e: wasmtime::Error| LoadError::Link { path: path.to_owned(), reason: format!("{e:#}") };
        let pre =
            GuestPre::new(description.version, self.linker.instantiate_pre(&component).map_err(link)?).map_err(link)?;
        Ok(TransformComponent::new(path, &bytes, description, pre))
    }
}
