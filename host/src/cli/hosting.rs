//! The client of `weir serve`, like `rpk transform`: `weir deploy`, `weir pipelines …`,
//! `weir logs`, `weir hosted-transforms …` (formerly `weir transforms …`) and, for the admin,
//! `weir tenants …`. The server comes from `--server` / `$WEIR_SERVER`, the token from
//! `$WEIR_TOKEN` (a tenant's, or the admin's for `weir tenants`); an `https://` server's
//! certificate is checked against `--ca-cert` / `$WEIR_CA_CERT`, else the public roots.
//!
//! The list and show commands print a table, or with `--output json` the server's answer as it
//! is: the `/v1` API's objects (docs/hosting.md lists their fields; `/v1/openapi.json` describes
//! them), an array for `ls` and an object for `show`. Other commands print the server's answer
//! as JSON.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::output::{self, OutputArgs, Table, cell};

/// Where the server is and who is asking.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The server's base URL.
    #[arg(long, env = "WEIR_SERVER", default_value = "http://127.0.0.1:7070", global = true)]
    server: String,
    /// The bearer token (a tenant's; the admin's for `weir tenants`).
    #[arg(long, env = "WEIR_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// PEM file of the CA certificate(s) to trust for an `https://` server, instead of the
    /// public ones (Mozilla's list, compiled in): for a server whose certificate a private CA
    /// signed.
    #[arg(long, env = "WEIR_CA_CERT", value_name = "PATH", global = true)]
    ca_cert: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant and print its token (shown once).
    Create {
        /// 1 to 63 of a-z 0-9 -.
        name: String,
        /// Every topic of the tenant's pipelines starts with it, e.g. `acme.`.
        #[arg(long)]
        topic_prefix: String,
        #[command(flatten)]
        quotas: QuotaArgs,
    },
    /// List tenants.
    Ls(OutputArgs),
    /// Replace a tenant's token and print the new one (the old one stops working).
    RotateToken { name: String },
    /// Revoke a tenant's token.
    RevokeToken { name: String },
    /// Delete a tenant (refused while it has pipelines), with every topic under its prefix and
    /// its consumer groups, unless the server keeps them (`on_tenant_delete = "retire"`).
    Rm { name: String },
}

/// A new tenant's quotas (docs/hosting.md); each left out is the server's `[tenant_defaults]`
/// one.
#[derive(Debug, clap::Args, serde::Serialize)]
pub struct QuotaArgs {
    /// Pipelines it may have.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_pipelines: Option<u32>,
    /// Largest `memory_limit_mb` of an operator.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_memory_mb: Option<u64>,
    /// Largest `deadline_ms` of a guest call.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_deadline_ms: Option<u64>,
    /// Most state of one pipeline, in MiB.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_state_mb: Option<u64>,
    /// Linear memory of all its operators on a node, in MiB.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_total_memory_mb: Option<u64>,
    /// Most CPU time of its pipelines on a node, in percent of one core (default: none, a fair
    /// share of the node).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_percent: Option<u32>,
    /// Transform versions it may store, all its transforms together.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_transform_versions: Option<u32>,
    /// Bytes of all its stored transform versions, in MiB.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_transform_mb: Option<u64>,
    /// Most `runtime.workers` of one pipeline.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_workers: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum HostedTransformsCommand {
    /// Upload a component as the transform's next version.
    Push { name: String, wasm: PathBuf },
    /// List your transforms.
    Ls(OutputArgs),
    /// Show a transform's versions (hash, size, contract, imports, exports).
    Show {
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Delete a transform (refused while a pipeline uses it).
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub enum PipelinesCommand {
    /// List your pipelines and their state.
    Ls(OutputArgs),
    /// Show a pipeline: spec, state, last error, lag, last checkpoint.
    Show {
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Stop a pipeline after committing its open epoch.
    Stop { name: String },
    /// Start a stopped or failed pipeline.
    Start { name: String },
    /// Stop and delete a pipeline, with its changelog, consumer group and state; deployed again,
    /// it starts from scratch.
    Rm { name: String },
}

/// `weir deploy <pipeline.toml>`.
#[derive(Debug, Args)]
pub struct DeployArgs {
    /// A pipeline file without the keys the server owns; each `[[transforms]]` names a local
    /// `wasm` file (uploaded unless the server has those bytes already) or an uploaded
    /// `transform`.
    pipeline: PathBuf,
    #[command(flatten)]
    server: ServerArgs,
}

/// `weir logs <pipeline> [-f]`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The pipeline.
    name: String,
    /// Keep printing new lines until interrupted.
    #[arg(short, long)]
    follow: bool,
    #[command(flatten)]
    server: ServerArgs,
}

struct Client {
    agent: ureq::Agent,
    base: String,
    token: String,
}

impl Client {
    fn new(args: &ServerArgs) -> anyhow::Result<Self> {
        let token = args.token.clone().context("no token: set WEIR_TOKEN (or pass --token)")?;
        let mut config =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(300)));
        if let Some(path) = &args.ca_cert {
            let roots = ca_certificates(path)?;
            config = config.tls_config(
                ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots))).build(),
            );
        }
        Ok(Self { agent: config.build().into(), base: args.server.trim_end_matches('/').to_owned(), token })
    }

    /// Sends `method path` with an optional body (content type, bytes); returns the JSON answer
    /// (`null` for 204), or the server's error message.
    fn call(&self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> anyhow::Result<Value> {
        let url = format!("{}/v1{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let sent = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self.agent.delete(&url).header("Authorization", &auth).call(),
            (method, body) => {
                let (content_type, bytes) = body.unwrap_or(("application/json", Vec::new()));
                let request = if method == "PUT" { self.agent.put(&url) } else { self.agent.post(&url) };
                request.header("Authorization", &auth).header("Content-Type", content_type).send(&bytes[..])
            }
        };
        let mut response = sent.map_err(|error| {
            let text = error.to_string();
            let hint = if text.contains("certificate") || text.contains("UnknownIssuer") {
                ": the server's TLS certificate is not trusted here; pass the CA that signed it with --ca-cert \
                 (or WEIR_CA_CERT)"
            } else {
                ""
            };
            anyhow::Error::new(error)
                .context(format!("cannot reach the server at {} (--server, WEIR_SERVER){hint}", self.base))
        })?;
        let status = response.status();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        if status.is_success() {
            return Ok(if text.is_empty() { Value::Null } else { serde_json::from_str(&text)? });
        }
        let error: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "message": text }));
        anyhow::bail!(
            "{} (HTTP {}, {})",
            error["message"].as_str().unwrap_or("?"),
            status.as_u16(),
            error["code"].as_str().unwrap_or("?")
        )
    }
}

/// The certificates of PEM file `path` (`--ca-cert`).
fn ca_certificates(path: &Path) -> anyhow::Result<Vec<ureq::tls::Certificate<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("--ca-cert: cannot read {}", path.display()))?;
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let ureq::tls::PemItem::Certificate(certificate) =
            item.with_context(|| format!("--ca-cert: {} is not PEM", path.display()))?
        {
            certificates.push(certificate);
        }
    }
    anyhow::ensure!(!certificates.is_empty(), "--ca-cert: {} holds no PEM certificate", path.display());
    Ok(certificates)
}

/// Prints the answer of a command that is not a list or show, as JSON (nothing for an empty
/// 204 answer).
fn print_answer(value: &Value) -> anyhow::Result<ExitCode> {
    if !value.is_null() {
        writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(value)?)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn tenants(command: TenantsCommand, server: &ServerArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(server)?;
    match command {
        TenantsCommand::Create { name, topic_prefix, quotas } => {
            let mut request = json!({ "name": name, "topic_prefix": topic_prefix });
            let quotas = serde_json::to_value(quotas)?;
            if quotas.as_object().is_some_and(|q| !q.is_empty()) {
                request["quotas"] = quotas;
            }
            print_answer(&client.call("POST", "/tenants", Some(("application/json", serde_json::to_vec(&request)?)))?)
        }
        TenantsCommand::Ls(args) => {
            output::print(args.output, &client.call("GET", "/tenants", None)?, |out, tenants| {
                let mut table = Table::new(&["NAME", "TOPIC PREFIX", "PIPELINES", "TOKEN"]);
                for tenant in items(tenants) {
                    let token = if tenant["token_active"] == true { "active" } else { "revoked" };
                    table.row([
                        cell(&tenant["name"]),
                        cell(&tenant["topic_prefix"]),
                        cell(&tenant["pipelines"]),
                        token.into(),
                    ]);
                }
                table.write(out)
            })
        }
        TenantsCommand::RotateToken { name } => {
            print_answer(&client.call("POST", &format!("/tenants/{name}/token"), None)?)
        }
        TenantsCommand::RevokeToken { name } => {
            print_answer(&client.call("DELETE", &format!("/tenants/{name}/token"), None)?)
        }
        TenantsCommand::Rm { name } => print_answer(&client.call("DELETE", &format!("/tenants/{name}"), None)?),
    }
}

pub fn hosted_transforms(command: HostedTransformsCommand, server: &ServerArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(server)?;
    match command {
        HostedTransformsCommand::Push { name, wasm } => print_answer(&push(&client, &name, &wasm)?),
        HostedTransformsCommand::Ls(args) => {
            output::print(args.output, &client.call("GET", "/transforms", None)?, |out, transforms| {
                let mut table = Table::new(&["NAME", "VERSIONS", "LATEST", "SIZE", "CONTRACT", "SHA256"]);
                for transform in items(transforms) {
                    let versions = items(&transform["versions"]);
                    let latest = versions.last().copied().unwrap_or(&Value::Null);
                    table.row([
                        cell(&transform["name"]),
                        versions.len().to_string(),
                        cell(&latest["version"]),
                        cell(&latest["size"]),
                        cell(&latest["contract"]),
                        cell(&latest["sha256"]),
                    ]);
                }
                table.write(out)
            })
        }
        HostedTransformsCommand::Show { name, output } => {
            let transform = client.call("GET", &format!("/transforms/{name}"), None)?;
            output::print(output.output, &transform, |out, transform| {
                writeln!(out, "transform {}", cell(&transform["name"]))?;
                let mut table = Table::new(&["VERSION", "SIZE", "CONTRACT", "UPLOADED AT (MS)", "SHA256"]);
                for version in items(&transform["versions"]) {
                    table.row(["version", "size", "contract", "uploaded_at_ms", "sha256"].map(|f| cell(&version[f])));
                }
                table.write(out)?;
                for version in items(&transform["versions"]) {
                    writeln!(out, "version {}:", cell(&version["version"]))?;
                    for list in ["exports", "imports"] {
                        let names: Vec<String> = items(&version[list]).into_iter().map(cell).collect();
                        writeln!(out, "  {list}: {}", names.join(", "))?;
                    }
                }
                Ok(())
            })
        }
        HostedTransformsCommand::Rm { name } => {
            print_answer(&client.call("DELETE", &format!("/transforms/{name}"), None)?)
        }
    }
}

/// The items of a JSON array (none for anything else).
fn items(value: &Value) -> Vec<&Value> {
    value.as_array().map(|items| items.iter().collect()).unwrap_or_default()
}

/// Uploads `wasm` as transform `name`, unless a version with the same bytes exists; returns
/// that version.
fn push(client: &Client, name: &str, wasm: &Path) -> anyhow::Result<Value> {
    let bytes = std::fs::read(wasm).with_context(|| format!("cannot read {}", wasm.display()))?;
    let sha256 = weir::hash_bytes(&bytes);
    if let Ok(existing) = client.call("GET", &format!("/transforms/{name}"), None)
        && let Some(version) =
            existing["versions"].as_array().into_iter().flatten().find(|v| v["sha256"] == sha256.as_str())
    {
        return Ok(version.clone());
    }
    client
        .call("PUT", &format!("/transforms/{name}"), Some(("application/wasm", bytes)))
        .with_context(|| format!("uploading {}", wasm.display()))
}

pub fn deploy(args: DeployArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let text =
        std::fs::read_to_string(&args.pipeline).with_context(|| format!("cannot read {}", args.pipeline.display()))?;
    let mut spec: toml::Table = text.parse().with_context(|| format!("{} is not TOML", args.pipeline.display()))?;
    let name =
        spec.get("name").and_then(toml::Value::as_str).map(str::to_owned).context("the pipeline file has no `name`")?;
    let base = args.pipeline.parent().unwrap_or(Path::new("."));
    for transform in spec.get_mut("transforms").and_then(toml::Value::as_array_mut).into_iter().flatten() {
        let Some(table) = transform.as_table_mut() else { continue };
        let Some(wasm) = table.remove("wasm") else { continue };
        let path = base.join(wasm.as_str().context("`wasm` must be a path")?);
        let transform_name = path.file_stem().and_then(|s| s.to_str()).context("`wasm` has no file name")?.to_owned();
        let version = push(&client, &transform_name, &path)?;
        eprintln!("{}: transform {transform_name} version {}", path.display(), version["version"]);
        table.insert("transform".into(), toml::Value::String(transform_name));
        table.insert(
            "version".into(),
            toml::Value::Integer(version["version"].as_i64().context("no version in the answer")?),
        );
    }
    let body = serde_json::to_vec(&spec)?;
    print_answer(&client.call("PUT", &format!("/pipelines/{name}"), Some(("application/json", body)))?)
}

pub fn pipelines(command: PipelinesCommand, server: &ServerArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(server)?;
    match command {
        PipelinesCommand::Ls(args) => {
            output::print(args.output, &client.call("GET", "/pipelines", None)?, |out, pipelines| {
                let mut table = Table::new(&["NAME", "STATE", "DESIRED", "RECORDS/S", "LAG", "LAST ERROR"]);
                for pipeline in items(pipelines) {
                    table.row([
                        cell(&pipeline["name"]),
                        cell(&pipeline["state"]),
                        cell(&pipeline["desired"]),
                        cell(&pipeline["records_per_second"]),
                        cell(&pipeline["metrics"]["lag_records"]),
                        cell(&pipeline["last_error"]),
                    ]);
                }
                table.write(out)
            })
        }
        PipelinesCommand::Show { name, output } => {
            let pipeline = client.call("GET", &format!("/pipelines/{name}"), None)?;
            output::print(output.output, &pipeline, |out, pipeline| {
                let metrics = &pipeline["metrics"];
                let mut table = Table::new(&[]);
                for (field, value) in [
                    ("name", &pipeline["name"]),
                    ("state", &pipeline["state"]),
                    ("desired", &pipeline["desired"]),
                    ("records/s", &pipeline["records_per_second"]),
                    ("records in", &metrics["records_in"]),
                    ("records out", &metrics["records_out"]),
                    ("lag", &metrics["lag_records"]),
                    ("last checkpoint", &metrics["last_checkpoint"]["id"]),
                    ("last error", &pipeline["last_error"]),
                ] {
                    table.row([field.to_owned(), cell(value)]);
                }
                table.write(out)?;
                // The spec as TOML, the form a tenant writes (the server keeps it as a TOML table, so it
                // has no nulls that TOML could not write).
                let spec = toml::to_string(&pipeline["spec"]).unwrap_or_else(|_| pipeline["spec"].to_string());
                writeln!(out, "spec:")?;
                for line in spec.lines() {
                    writeln!(out, "{}", if line.is_empty() { String::new() } else { format!("  {line}") })?;
                }
                Ok(())
            })
        }
        PipelinesCommand::Stop { name } => {
            print_answer(&client.call("POST", &format!("/pipelines/{name}/stop"), None)?)
        }
        PipelinesCommand::Start { name } => {
            print_answer(&client.call("POST", &format!("/pipelines/{name}/start"), None)?)
        }
        PipelinesCommand::Rm { name } => print_answer(&client.call("DELETE", &format!("/pipelines/{name}"), None)?),
    }
}

/// Lines asked for at once by `weir logs`.
const LOG_PAGE: usize = 1000;

pub fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let mut after = 0;
    loop {
        let wait = if args.follow { 10_000 } else { 0 };
        let path = format!("/pipelines/{}/logs?after={after}&wait_ms={wait}&limit={LOG_PAGE}", args.name);
        let lines = client.call("GET", &path, None)?;
        let lines = items(&lines);
        for line in &lines {
            writeln!(std::io::stdout(), "{}", line["line"].as_str().unwrap_or_default())?;
            after = line["seq"].as_u64().unwrap_or(after);
        }
        // Without --follow: the kept lines, page by page, then stop.
        if !args.follow && lines.len() < LOG_PAGE {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
