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

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use sha2::{Digest, Sha256};

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
    /// missing tools, or says what to install), then records the inputs it was built from beside
    /// it (see [`Project::up_to_date`]).
    ///
    /// # Errors
    /// When the SDK is not found, a source has a syntax error, or the build script fails (its
    /// output names the problem).
    pub fn build(&self, out: &Path) -> anyhow::Result<()> {
        let sdk = sdk_dir()?;
        let script = sdk.join(self.language.sdk_folder()).join("build.sh");
        let mut command = Command::new(&script);
        match self.language {
            Language::Rust | Language::Go => command.arg(&self.dir).arg(out),
            Language::Python => command.arg(&self.dir).arg(&self.python_module).arg(out),
            Language::Js => command.arg(self.dir.join(&self.js_entry)).arg(out),
        };
        self.check_syntax()?;
        let status = command.status().with_context(|| format!("running {}", script.display()))?;
        if !status.success() {
            bail!("building {} failed ({status}; {} said why, above)", self.dir.display(), script.display());
        }
        // Hashed as the build left the project: the first cargo build adds the project's own
        // package to the Cargo.lock that `init` copied from the SDK. (A file saved while the
        // build ran then counts as built; `--force` rebuilds.)
        let inputs = self.inputs_hash(&sdk);
        let component = hash_file(out).with_context(|| format!("reading the built {}", out.display()))?;
        let stamp = stamp_path(out);
        std::fs::write(&stamp, format!("inputs {inputs}\ncomponent {component}\n"))
            .with_context(|| format!("writing {}", stamp.display()))
    }

    /// Whether `component` was built by [`Project::build`] from the project as it is now: its
    /// stamp (a hidden file beside it) records the hash of the inputs it was built from and of
    /// the component, and both still match. The inputs are the project's files (sources,
    /// manifest, lock files, its copy of the SDK; not `samples/`, which the component does not
    /// contain), those of its cargo workspace when it is a member of one, the Weir version and
    /// the files of the SDK that builds it (build scripts, pinned tool versions).
    pub fn up_to_date(&self, component: &Path) -> bool {
        let Ok(stamp) = std::fs::read_to_string(stamp_path(component)) else { return false };
        let recorded = |field: &str| stamp.lines().find_map(|line| line.strip_prefix(field)?.strip_prefix(' '));
        let Ok(sdk) = sdk_dir() else { return false };
        recorded("inputs") == Some(self.inputs_hash(&sdk).as_str())
            && hash_file(component).is_ok_and(|hash| recorded("component") == Some(hash.as_str()))
    }

    /// The hash of the build's inputs (see [`Project::up_to_date`]).
    fn inputs_hash(&self, sdk: &Path) -> String {
        let mut hash = Sha256::new();
        hash.update(format!("weir {}\0{}\0", env!("CARGO_PKG_VERSION"), self.language));
        hash.update(format!("{}\0{}\0", self.python_module, self.js_entry));
        let mut folders = vec![self.dir.clone(), sdk.join(self.language.sdk_folder()), sdk.join("wit")];
        if self.language == Language::Rust {
            // A member of a cargo workspace builds with the workspace's lock file and path
            // dependencies (the rule of guest-sdk/rust/build.sh: the project or one of its two
            // parents).
            let is_workspace = |d: &Path| {
                std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.lines().any(|l| l == "[workspace]"))
            };
            if let Some(root) = self.dir.ancestors().take(3).skip(1).find(|d| is_workspace(d)) {
                folders.push(root.to_owned());
            }
        }
        for folder in folders {
            let mut files = Vec::new();
            source_files(&folder, &folder, None, "", &mut files);
            files.sort();
            hash.update(folder.as_os_str().as_encoded_bytes());
            for file in files {
                hash.update([0]);
                hash.update(file.as_os_str().as_encoded_bytes());
                hash.update([0]);
                // An unreadable file counts as changed.
                hash.update(hash_file(&folder.join(&file)).unwrap_or_default());
            }
        }
        hex(&hash.finalize())
    }

    /// Checks the syntax of a Python or JavaScript project's own source files (not its tests
    /// or SDK copy) before the build: componentize-py wraps a syntax error in its traceback, and
    /// componentize-js reports one without file or line. A missing interpreter skips the check
    /// (the build script then says what to install).
    ///
    /// # Errors
    /// The first syntax error, as `<file>:<line>: <message>` with the line, relative to the
    /// project folder.
    fn check_syntax(&self) -> anyhow::Result<()> {
        let (extensions, tests) = match self.language {
            Language::Python => (&["py"][..], "tests"),
            Language::Js => (&["js", "mjs"][..], "test"),
            Language::Rust | Language::Go => return Ok(()),
        };
        // Not the SDK copy, nor the unit tests (their own runner reports those).
        let mut files = Vec::new();
        source_files(&self.dir, &self.dir, Some(extensions), tests, &mut files);
        files.retain(|file| !file.starts_with("weir-sdk"));
        files.sort();
        for file in &files {
            let report = match self.language {
                Language::Python => python_syntax_error(&self.dir, file),
                _ => js_syntax_error(&self.dir, file),
            };
            if let Some(report) = report {
                bail!("{report}\n(a syntax error in {}: fix it and build again)", self.dir.join(file).display());
            }
        }
        Ok(())
    }
}

/// The stamp of the build of `component`: `.<file name>.build` beside it (hidden, so that a
/// folder's `*.wasm` stays the components).
fn stamp_path(component: &Path) -> PathBuf {
    let name = component.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    component.with_file_name(format!(".{name}.build"))
}

/// The SHA-256 of a file's contents, in hex.
fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut hash = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hash)?;
    Ok(hex(&hash.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Files and folders of a project or SDK that hold no build input: build outputs, dependencies,
/// caches, samples, and the lock file the SDK's install script creates on its first build.
const NOT_SOURCES: &[&str] =
    &["target", "node_modules", "samples", ".git", "__pycache__", ".pytest_cache", ".install.lock"];

/// Collects into `files` the paths (relative to `root`) of the files below `dir`, outside
/// [`NOT_SOURCES`] and `skip`; with `extensions`, only the files with one of them.
fn source_files(root: &Path, dir: &Path, extensions: Option<&[&str]>, skip: &str, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if NOT_SOURCES.iter().any(|not| name == *not) || name == skip {
            continue;
        }
        let path = entry.path();
        let wanted = |path: &Path| {
            extensions.is_none_or(|extensions| path.extension().is_some_and(|e| extensions.iter().any(|x| e == *x)))
        };
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            source_files(root, &path, extensions, skip, files);
        } else if wanted(&path)
            && let Ok(relative) = path.strip_prefix(root)
        {
            files.push(relative.to_owned());
        }
    }
}

/// Compiles `file` (relative to `dir`) with Python, prints its first syntax error as
/// `file:line: SyntaxError: message`, the line and a caret.
const PY_CHECK: &str = r#"
import sys
path = sys.argv[1]
try:
    compile(open(path, "rb").read(), path, "exec", dont_inherit=True)
except SyntaxError as e:
    print(f"{path}:{e.lineno}: {type(e).__name__}: {e.msg}")
    if e.text:
        print("    " + e.text.rstrip("\n"))
        if e.offset:
            print("    " + " " * (e.offset - 1) + "^")
    sys.exit(1)
"#;

/// The syntax error of the Python file `file` (relative to `dir`), if it has one: compiled by
/// componentize-py's own Python (its venv, when installed) or `python3`.
fn python_syntax_error(dir: &Path, file: &Path) -> Option<String> {
    let cache = std::env::var_os("WEIR_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/weir")))?;
    let venv_python = cache.join("polyglot/venv/bin/python");
    let python = if venv_python.is_file() { venv_python } else { PathBuf::from("python3") };
    let output = Command::new(python).arg("-c").arg(PY_CHECK).arg(file).current_dir(dir).output().ok()?;
    (!output.status.success()).then(|| String::from_utf8_lossy(&output.stdout).trim_end().to_owned())
}

/// The syntax error of the JavaScript module `file` (relative to `dir`), if it has one, as
/// `node --check` reports it (read as an ES module, from stdin, since a `.js` file outside a
/// `"type": "module"` package would be checked as CommonJS): `file:line: SyntaxError: message`,
/// then the line and a caret.
fn js_syntax_error(dir: &Path, file: &Path) -> Option<String> {
    let source = std::fs::File::open(dir.join(file)).ok()?;
    let output = Command::new("node").args(["--input-type=module", "--check"]).stdin(source).output().ok()?;
    if output.status.success() {
        return None;
    }
    // `[stdin]:<line>`, the line and a caret, a blank line, `SyntaxError: <message>`, a stack.
    let text = String::from_utf8_lossy(&output.stderr);
    let mut lines = text.lines();
    let line = lines.next()?.strip_prefix("[stdin]:").unwrap_or("?").to_owned();
    let shown: Vec<&str> = lines.by_ref().take_while(|l| !l.trim().is_empty()).collect();
    let message = lines.find(|l| !l.trim().is_empty()).unwrap_or("SyntaxError");
    let mut report = format!("{}:{line}: {message}", file.display());
    for shown_line in shown {
        report.push_str(&format!("\n    {shown_line}"));
    }
    Some(report)
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The project folder (holding weir-transform.toml).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Folder for the component, `<folder name>.wasm`; default: the project's `target/`.
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Build even when the component is up to date (say, after a toolchain update, which the
    /// up-to-date check does not see).
    #[arg(long)]
    force: bool,
}

/// `weir transform build`: builds unless the component is up to date, then prints what `weir
/// transform check` prints.
pub fn build_command(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let project = Project::open(&args.dir)?;
    let out = project.component_path(args.out_dir.as_deref());
    if !args.force && project.up_to_date(&out) {
        eprintln!(
            "build: {} is up to date (nothing of the project, its SDK or Weir changed since its build; --force builds anyway)",
            out.display()
        );
    } else {
        project.build(&out)?;
    }
    super::check(&out)
}
