//! A transform project: a folder with a `weir-transform.toml` that names its language, and
//! `weir transform build`, which turns it into a component with the SDK's build script.
//!
//! The one rule for the language: the manifest's `language` key (`rust`, `python`, `js` or
//! `go`). Files are not guessed from: a folder may hold a `package.json` for tooling and a Go
//! program at once, and the manifest also carries what the build needs (the Python module, the
//! JavaScript entry) and the samples' configuration.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::SystemTime;

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;

use super::sdk::sdk_dir;

/// The manifest's file name, in the project folder.
pub const MANIFEST: &str = "weir-transform.toml";

/// Languages with a guest SDK (`guest-sdk/<sdk_folder>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    Js,
    Go,
}

impl Language {
    /// The SDK's folder under `guest-sdk/` (holding its `build.sh`).
    pub fn sdk_folder(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::Js => "js",
            Self::Go => "go",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The SDK folders are named after the languages.
        f.write_str(self.sdk_folder())
    }
}

/// `weir-transform.toml`. Unknown keys are errors, so that a typo is not silently ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    language: String,
    /// Python: the module that binds `WitWorld` (default `app`).
    module: Option<String>,
    /// JavaScript: the entry module (default `index.js`).
    entry: Option<String>,
    #[serde(default)]
    test: TestSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestSection {
    /// The transform's configuration for the samples; values may be TOML strings, numbers or
    /// booleans (the transform receives their text).
    #[serde(default)]
    config: BTreeMap<String, toml::Value>,
    /// Named sink outputs the transform may address.
    #[serde(default)]
    outputs: Vec<String>,
}

/// A transform project, read from its manifest.
#[derive(Debug)]
pub struct Project {
    /// The project folder (absolute).
    pub dir: PathBuf,
    /// The component's name: the folder's name (`<name>.wasm`).
    pub name: String,
    pub language: Language,
    python_module: String,
    js_entry: String,
    /// Configuration of the samples' runs, `key=value` pairs.
    pub test_config: Vec<(String, String)>,
    /// Named outputs the samples' runs allow.
    pub test_outputs: Vec<String>,
}

impl Project {
    /// Reads the project in `dir`.
    ///
    /// # Errors
    /// When `dir` has no readable, valid `weir-transform.toml` or names an unknown language; the
    /// message names the file and what to write.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let dir = std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))?;
        let path = dir.join(MANIFEST);
        if !path.is_file() {
            bail!(
                "{} is not a transform project: it has no {MANIFEST} (create one with `weir transform init`, or \
                 write {MANIFEST} with `language = \"rust\"`, \"python\", \"js\" or \"go\")",
                dir.display()
            );
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let manifest: Manifest = toml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))?;
        let language = match manifest.language.as_str() {
            "rust" => Language::Rust,
            "python" => Language::Python,
            "js" => Language::Js,
            "go" => Language::Go,
            other => bail!(
                "{}: unknown language `{other}`: Weir transforms are written in rust, python, js or go",
                path.display()
            ),
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .with_context(|| format!("{} has no folder name to name the component after", dir.display()))?;
        let test_config = manifest
            .test
            .config
            .into_iter()
            .map(|(key, value)| match value {
                toml::Value::String(text) => Ok((key, text)),
                toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                    Ok((key, value.to_string()))
                }
                other => {
                    bail!("{}: [test.config] `{key}` must be a string, number or boolean, not {other}", path.display())
                }
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            dir,
            name,
            language,
            python_module: manifest.module.unwrap_or_else(|| "app".into()),
            js_entry: manifest.entry.unwrap_or_else(|| "index.js".into()),
            test_config,
            test_outputs: manifest.test.outputs,
        })
    }

    /// Where the component goes: `<out_dir>/<name>.wasm`, by default in the project's `target/`.
    pub fn component_path(&self, out_dir: Option<&Path>) -> PathBuf {
        out_dir.map_or_else(|| self.dir.join("target"), Path::to_owned).join(format!("{}.wasm", self.name))
    }

    /// Builds the component to `out` with the SDK's build script for the language (which installs
    /// missing tools, or says what to install).
    ///
    /// # Errors
    /// When the SDK is not found, or the build script fails (its output names the problem).
    pub fn build(&self, out: &Path) -> anyhow::Result<()> {
        let script = sdk_dir()?.join(self.language.sdk_folder()).join("build.sh");
        let mut command = Command::new(&script);
        match self.language {
            Language::Rust | Language::Go => command.arg(&self.dir).arg(out),
            Language::Python => command.arg(&self.dir).arg(&self.python_module).arg(out),
            Language::Js => command.arg(self.dir.join(&self.js_entry)).arg(out),
        };
        let status = command.status().with_context(|| format!("running {}", script.display()))?;
        if !status.success() {
            bail!("building {} failed ({status}; {} said why, above)", self.dir.display(), script.display());
        }
        Ok(())
    }

    /// Whether `component` is missing or older than a file of the project (sources, manifest,
    /// the project's copy of the SDK; not `samples/`, which the component does not contain).
    pub fn needs_build(&self, component: &Path) -> bool {
        let Ok(built) = component.metadata().and_then(|m| m.modified()) else { return true };
        newest_source(&self.dir).is_some_and(|newest| newest > built)
    }
}

/// Folders of a project that hold no build input: build outputs, dependencies, caches, samples.
const NOT_SOURCES: &[&str] = &["target", "node_modules", "samples", ".git", "__pycache__", ".pytest_cache"];

/// The newest modification time of the files below `dir`, outside [`NOT_SOURCES`].
fn newest_source(dir: &Path) -> Option<SystemTime> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .flatten()
        .filter(|entry| !NOT_SOURCES.iter().any(|name| entry.file_name() == *name))
        .filter_map(|entry| {
            let kind = entry.file_type().ok()?;
            if kind.is_dir() { newest_source(&entry.path()) } else { entry.metadata().ok()?.modified().ok() }
        })
        .max()
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The project folder (holding weir-transform.toml).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Folder for the component, `<folder name>.wasm`; default: the project's `target/`.
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

/// `weir transform build`: builds, then prints what `weir transform check` prints.
pub fn build_command(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let project = Project::open(&args.dir)?;
    let out = project.component_path(args.out_dir.as_deref());
    project.build(&out)?;
    super::check(&out)
}
