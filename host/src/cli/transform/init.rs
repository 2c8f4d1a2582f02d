//! `weir transform init`: a new transform project from the SDK's templates
//! (`guest-sdk/templates`), with a copy of the language's SDK in `weir-sdk/`.
//!
//! The SDK is copied rather than referenced: a project outside the Weir checkout then builds and
//! tests without a path into it (JavaScript must, as componentize-js reads modules only below the
//! project folder), and the copy pins the SDK version the project was written against. Only the
//! build tools (componentize-py, componentize-js, the Go adapter, the Rust toolchain set-up) come
//! from the installed Weir's SDK folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use super::project::{Language, MANIFEST};
use super::sdk::sdk_dir;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The new project's folder (created; must not exist or be empty). Its name names the
    /// component: letters, digits, `-` and `_`, starting with a letter.
    dir: PathBuf,
    /// The language to write the transform in.
    #[arg(long, value_enum)]
    lang: Language,
    /// What the generated transform does: map (one output per record), filter (forward the
    /// records that pass a test) or aggregate (running totals per key, in state).
    #[arg(long, value_enum, default_value_t = Template::Map)]
    template: Template,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Template {
    Map,
    Filter,
    Aggregate,
}

impl Template {
    fn name(self) -> &'static str {
        match self {
            Self::Map => "map",
            Self::Filter => "filter",
            Self::Aggregate => "aggregate",
        }
    }
}

/// Files and folders of an SDK that a project's copy leaves out: build scripts and tools (they
/// run from the installed SDK) and caches.
const NOT_VENDORED: &[&str] =
    &["build.sh", "install.sh", "bin", "cmd", "node_modules", "__pycache__", ".pytest_cache", "target"];

pub fn execute(args: InitArgs) -> anyhow::Result<ExitCode> {
    let dir = std::path::absolute(&args.dir)?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let valid = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        bail!(
            "`{name}` cannot name a transform: use letters, digits, `-` and `_`, starting with a letter \
             (the folder's name becomes the component's and the package's name)"
        );
    }
    if dir.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
        bail!("{} already exists and is not empty: choose a new folder", dir.display());
    }
    let sdk = sdk_dir()?;
    let templates = sdk.join("templates");
    let (lang, template) = (args.lang, args.template);
    let fill = |text: &str| {
        text.replace("{{name}}", &name)
            .replace("{{language}}", &lang.to_string())
            .replace("{{template}}", template.name())
            .replace("{{source}}", source_file(lang))
            .replace("{{sdk}}", &sdk.display().to_string())
    };

    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let lang_templates = templates.join(lang.sdk_folder());
    let source = read(&lang_templates.join(format!("{}.{}", template.name(), extension(lang))))?;
    write(&dir.join(source_file(lang)), &fill(&source))?;
    let common = lang_templates.join("files");
    for entry in std::fs::read_dir(&common).with_context(|| format!("reading {}", common.display()))? {
        let path = entry?.path();
        let file_name = path.file_name().context("template file name")?.to_string_lossy();
        // `gitignore` is stored without its dot, so that it does not apply to the SDK itself.
        let target = if file_name == "gitignore" { ".gitignore".into() } else { file_name.into_owned() };
        write(&dir.join(target), &fill(&read(&path)?))?;
    }
    write(&dir.join("README.md"), &fill(&read(&templates.join("README.md"))?))?;
    write(&dir.join(MANIFEST), &manifest(lang, template))?;
    let samples = templates.join("samples").join(template.name());
    for (from, to) in [("input.jsonl", "example.input.jsonl"), ("expected.jsonl", "example.expected.jsonl")] {
        write(&dir.join("samples").join(to), &read(&samples.join(from))?)?;
    }

    let vendored = dir.join("weir-sdk");
    copy_tree(&sdk.join(lang.sdk_folder()), &vendored.join(lang.sdk_folder()))?;
    // The contract's WIT, where the SDKs' builds look for it (every SDK is on contract 0.2; a
    // project whose copy of an SDK is on 0.1 has its wit-0.1 from then).
    copy_tree(&sdk.join("wit"), &vendored.join("wit"))?;
    if lang == Language::Rust {
        // The SDK's lock file pins its dependencies (wit-bindgen, serde) for the project too.
        std::fs::copy(sdk.join("rust/Cargo.lock"), dir.join("Cargo.lock")).context("copying the SDK's Cargo.lock")?;
    }

    println!(
        "created {} ({lang}, {} template): build with `weir transform build {}`, test with `weir transform test {}`",
        dir.display(),
        template.name(),
        args.dir.display(),
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The generated transform's source file, relative to the project folder.
fn source_file(lang: Language) -> &'static str {
    match lang {
        Language::Rust => "src/lib.rs",
        Language::Python => "app.py",
        Language::Js => "index.js",
        Language::Go => "main.go",
    }
}

fn extension(lang: Language) -> &'static str {
    match lang {
        Language::Rust => "rs",
        Language::Python => "py",
        Language::Js => "js",
        Language::Go => "go",
    }
}

/// The project's `weir-transform.toml`.
fn manifest(lang: Language, template: Template) -> String {
    let entry = match lang {
        Language::Python => "# The module that binds `WitWorld = export(...)`.\nmodule = \"app\"\n",
        Language::Js => "# The module that exports init/process/snapshot/restore/onTimer.\nentry = \"index.js\"\n",
        Language::Rust | Language::Go => "",
    };
    let config = match template {
        Template::Filter => "config = { min_amount = 100 }",
        Template::Map | Template::Aggregate => "config = {}",
    };
    format!(
        "# A Weir transform project: `weir transform build` and `weir transform test` read this file.\n\
         # The component is named after this folder: target/<folder>.wasm.\n\
         language = \"{lang}\"\n{entry}\n\
         # `weir transform test` runs every samples/<case>.input.jsonl through the component with this\n\
         # configuration and compares the outputs with samples/<case>.expected.jsonl.\n\
         [test]\n{config}\n"
    )
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading template {}", path.display()))
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Copies the files below `from` to `to`, leaving out [`NOT_VENDORED`].
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        if NOT_VENDORED.iter().any(|name| entry.file_name() == *name) {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {} to {}", entry.path().display(), target.display()))?;
        }
    }
    Ok(())
}
