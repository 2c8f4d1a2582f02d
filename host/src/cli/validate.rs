//! `weir validate <pipeline.toml>`: checks a pipeline file without a broker, and reports every
//! error at once.
//!
//! The file is read as `weir run` reads it ([`PipelineConfig::from_file_with_checks`]: TOML
//! syntax, unknown and missing keys, types, ranges and the rules between keys), and each
//! component it names is loaded as `weir run` and `weir transform check` load it
//! ([`WasmEngine::load`]: the file exists, is a valid component, implements `weir:transform` and
//! links against the host). Exit status 0 with a one-line summary when the file is valid; 1 with
//! every error, each naming its key and line, when it is not.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use weir::{ConfigError, EngineConfig, LoadError, PipelineConfig, WasmEngine};

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The pipeline file.
    pipeline: PathBuf,
}

pub fn execute(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let engine = WasmEngine::new(&EngineConfig::with_default_cache()?)?;
    let config = PipelineConfig::from_file_with_checks(&args.pipeline, |config| check_components(config, &engine))?;
    writeln!(std::io::stdout(), "{}: valid: {}", args.pipeline.display(), summary(&config))?;
    Ok(ExitCode::SUCCESS)
}

/// An error for each transform whose component does not load, at its `transforms[i].wasm`.
fn check_components(config: &PipelineConfig, engine: &WasmEngine) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    for (i, transform) in config.transforms.iter().enumerate() {
        if let Err(error) = engine.load(&transform.wasm) {
            errors.push(ConfigError::invalid(format!("transforms[{i}].wasm"), advice(&error, &transform.wasm)));
        }
    }
    errors
}

/// What failed, and what to do about it.
fn advice(error: &LoadError, wasm: &Path) -> String {
    match error {
        LoadError::Read { .. } => format!(
            "{error}: fix the path (relative to the pipeline file), or build the component first \
             (`weir transform build` in its project)"
        ),
        _ => format!(
            "{error}: point it at a weir:transform component (`weir transform check {}` describes a file)",
            wasm.display()
        ),
    }
}

/// `pipeline flight-delays: flights → flight-delays → flight-delays (exactly-once)`, with the
/// named outputs and the dead-letter topic when there are.
fn summary(config: &PipelineConfig) -> String {
    let operators: Vec<&str> = config.transforms.iter().map(|t| t.name.as_str()).collect();
    let mut sink: Vec<String> = config.sink.topic.iter().cloned().collect();
    for (output, topic) in &config.sink.outputs {
        sink.push(format!("{output}: {topic}"));
    }
    if let Some(pg) = &config.sink.postgres {
        let output = pg.output.as_ref().map_or(String::new(), |name| format!("{name}: "));
        sink.push(format!("{output}PostgreSQL table {}", pg.table));
    }
    let mut sink = sink.join(", ");
    if let Some(dead) = &config.sink.dead_letter_topic {
        sink.push_str(&format!(", dead letters: {dead}"));
    }
    format!(
        "pipeline {}: source {} → operators {} → sink {} ({})",
        config.name,
        config.source.topics.join(", "),
        operators.join(" → "),
        sink,
        config.sink.guarantee
    )
}
