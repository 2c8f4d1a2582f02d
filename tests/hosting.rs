//! `weir serve` (issue 15): tenants upload transforms and deploy pipelines over real HTTP on
//! loopback, against the real broker. Two tenants' flight-delays stay exact through a SIGKILL of
//! the server and an upgrade; every route refuses missing, bad and foreign tokens; hostile
//! uploads get a 4xx and the server stays up; `/readyz` counts a failed pipeline without naming
//! it to anonymous callers; the dashboard and `/metrics` need a token and show a tenant its own
//! pipelines only (issue 44).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, Producer};
use serde_json::{Value, json};
use weir_tests::flights::verify;
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, keyed, poll_until, produce, signal, wait_exit};
use weir_tests::{Isolation, bootstrap, flight_rows, plugin, unique_name, weir_binary};

const ADMIN: &str = "admin-token-for-the-hosting-tests";

/// A `weir serve` process with its own data directory and registry topic.
struct Serve {
    dir: tempfile::TempDir,
    child: Option<Child>,
    base: String,
    /// Extra environment variables of the process (a secret its `[kafka]` refers to).
    env: Vec<(String, String)>,
    /// The CA to trust when the server speaks TLS (`tls_cert`).
    ca: Option<PathBuf>,
}

impl Serve {
    /// Writes `serve.toml` (with `extra` lines) and starts the server.
    fn start(extra: &str) -> Self {
        Self::node("node-1", &unique_name("weir-registry"), extra)
    }

    /// Starts another node sharing this one's registry topic, as `node_id`.
    fn another_node(&self, node_id: &str) -> Self {
        let text = std::fs::read_to_string(self.dir.path().join("serve.toml")).expect("serve.toml");
        let registry = text.split("registry_topic = \"").nth(1).and_then(|t| t.split('"').next()).expect("registry");
        Self::node(node_id, registry, "")
    }

    fn node(node_id: &str, registry: &str, extra: &str) -> Self {
        Self::on_cluster(node_id, registry, &format!("brokers = \"{}\"\n", bootstrap()), extra, Vec::new())
    }

    /// Starts a node whose cluster is `cluster`: a `brokers = …` line, or a `[kafka]` table
    /// (written last) whose secret references `env` resolves.
    fn on_cluster(node_id: &str, registry: &str, cluster: &str, extra: &str, env: Vec<(String, String)>) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (brokers, table) = if cluster.starts_with('[') { ("", cluster) } else { (cluster, "") };
        let text = format!(
            "listen = \"127.0.0.1:0\"\n{brokers}data_dir = \"data\"\nnode_id = \"{node_id}\"\nregistry_topic = \"{registry}\"\n{extra}\n{table}",
        );
        std::fs::write(dir.path().join("serve.toml"), text).expect("serve.toml");
        let mut serve = Self { dir, child: None, base: String::new(), env, ca: None };
        serve.spawn();
        serve
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("serve.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts the process (appending to its log) and waits until it serves.
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).expect("log");
        let before = self.log().matches("serving the API at").count();
        // A relative `--config`, as a user in the server's directory types it.
        let child = Command::new(weir_binary())
            .args(["serve", "--config", "serve.toml"])
            .current_dir(self.dir.path())
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start weir serve");
        self.child = Some(child);
        let started = Instant::now();
        loop {
            let log = self.log();
            if let Some(line) = log.split("serving the API at ").nth(before + 1) {
                let (scheme, rest) = line.split_once("://").expect("a URL");
                let address = rest.split('/').next().expect("address");
                self.base = format!("{scheme}://{address}");
                return;
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            assert!(exited.is_none() && started.elapsed() < RUN_TIMEOUT, "weir serve did not start:\n{log}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs the server.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        signal(&child, "KILL");
        wait_exit(&mut child, Duration::from_secs(10)).expect("killed");
    }

    /// `method path` with `token` and a body; returns the status and the JSON answer.
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<(&str, Vec<u8>)>) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let auth = token.map(|t| format!("Bearer {t}"));
        // A connection of its own per request: the server closes one whose body it refused
        // unread (413), and a pooled connection could be reused just before that close lands.
        let mut config = ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(RUN_TIMEOUT));
        if let Some(ca) = &self.ca {
            let pem = std::fs::read(ca).expect("the CA");
            let roots = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item.expect("PEM") {
                    ureq::tls::PemItem::Certificate(certificate) => Some(certificate),
                    _ => None,
                })
                .collect();
            let roots = ureq::tls::RootCerts::Specific(std::sync::Arc::new(roots));
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let http: ureq::Agent = config.build().into();
        let sent = match (method, body) {
            ("GET", _) => with_auth(http.get(&url), auth.as_deref()).call(),
            ("DELETE", _) => with_auth(http.delete(&url), auth.as_deref()).call(),
            (method, body) => {
                let (content_type, bytes) = body.unwrap_or(("application/json", Vec::new()));
                let request = if method == "PUT" { http.put(&url) } else { http.post(&url) };
                with_auth(request, auth.as_deref()).header("Content-Type", content_type).send(&bytes[..])
            }
        };
        let mut response = sent.unwrap_or_else(|e| panic!("{method} {url}: {e}\n{}", self.log()));
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Like [`Serve::call`], asserting a 2xx answer.
    fn ok(&self, method: &str, path: &str, token: &str, body: Option<(&str, Vec<u8>)>) -> Value {
        let (status, answer) = self.call(method, path, Some(token), body);
        assert!((200..300).contains(&status), "{method} {path}: {status} {answer}\n{}", self.log());
        answer
    }

    /// Creates tenant `name` with `prefix`; returns its token.
    fn tenant(&self, name: &str, prefix: &str, quotas: Option<Value>) -> String {
        let mut request = json!({ "name": name, "topic_prefix": prefix });
        if let Some(quotas) = quotas {
            request["quotas"] = quotas;
        }
        let answer =
            self.ok("POST", "/v1/tenants", ADMIN, Some(("application/json", request.to_string().into_bytes())));
        answer["token"].as_str().expect("a token").to_owned()
    }

    fn upload(&self, token: &str, name: &str, bytes: Vec<u8>) -> (u16, Value) {
        self.call("PUT", &format!("/v1/transforms/{name}"), Some(token), Some(("application/wasm", bytes)))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn with_auth<B>(request: ureq::RequestBuilder<B>, auth: Option<&str>) -> ureq::RequestBuilder<B> {
    match auth {
        Some(auth) => request.header("Authorization", auth),
        None => request,
    }
}

/// A flight-delays spec reading `source` and writing `sink`, as a tenant deploys it.
fn flight_delays_spec(source: &str, sink: &str, version: Option<u32>) -> String {
    let version = version.map(|v| format!("version = {v}\n")).unwrap_or_default();
    format!(
        "[source]\ntopics = [\"{source}\"]\nbatch_size = 64\n\n\
         [[transforms]]\nname = \"flight-delays\"\ntransform = \"flight-delays\"\n{version}\n\
         [sink]\ntopic = \"{sink}\"\ncreate_topics = true\n\n[checkpoint]\ninterval_ms = 100\n"
    )
}

fn toml_body(text: &str) -> Option<(&'static str, Vec<u8>)> {
    Some(("application/toml", text.as_bytes().to_vec()))
}

/// Runs the `weir` client with `args`, the server and `token` in the environment; returns its
/// stdout and stderr.
fn client(serve: &Serve, token: &str, args: &[&str]) -> (String, String) {
    let output = Command::new(weir_binary())
        .args(args)
        .env("WEIR_SERVER", &serve.base)
        .env("WEIR_TOKEN", token)
        .output()
        .expect("run the weir client");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "weir {args:?} failed:\n{stdout}{stderr}");
    (stdout.into_owned(), stderr.into_owned())
}

/// Runs the `weir` client with `args` (a list or show command with `--output json`); returns
/// the one JSON document it prints.
fn client_json(serve: &Serve, token: &str, args: &[&str]) -> Value {
    let (stdout, stderr) = client(serve, token, args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("weir {args:?}: {e}:\n{stdout}{stderr}"))
}

/// The client's list and show commands, with acme's pipeline `delays` (writing `sink`) and
/// transform `flight-delays` deployed, and tenants acme and globex: one JSON document with
/// `--output json`, a table by default; `weir transforms`, the former name of `weir
/// hosted-transforms`, still works.
fn client_lists_and_shows(serve: &Serve, token: &str, sink: &str) {
    let pipelines = client_json(serve, token, &["pipelines", "ls", "--output", "json"]);
    assert_eq!(pipelines.as_array().map(Vec::len), Some(1), "{pipelines}");
    assert_eq!(pipelines[0]["name"], "delays", "{pipelines}");
    let shown = client_json(serve, token, &["pipelines", "show", "delays", "-o", "json"]);
    assert_eq!(shown["spec"]["sink"]["topic"], sink, "{shown}");
    for group in ["hosted-transforms", "transforms"] {
        let transforms = client_json(serve, token, &[group, "ls", "--output", "json"]);
        let latest = (&transforms[0]["name"], &transforms[0]["versions"][0]["version"]);
        assert_eq!(latest, (&json!("flight-delays"), &json!(1)), "{group}: {transforms}");
        let shown = client_json(serve, token, &[group, "show", "flight-delays", "--output", "json"]);
        assert_eq!(shown["versions"], transforms[0]["versions"], "{group}");
    }
    let tenants = client_json(serve, ADMIN, &["tenants", "ls", "--output", "json"]);
    let names: Vec<&str> = tenants.as_array().expect("an array").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["acme", "globex"], "{tenants}");
    let (table, _) = client(serve, token, &["pipelines", "ls"]);
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!((&rows[0][..2], rows[1][0]), (&["NAME", "STATE"][..], "delays"), "{table}");
}

/// Writes `rows` to `topic` about 1000 a second, on a thread.
fn feed_slowly(topic: &str, rows: Vec<(Option<String>, String)>) -> std::thread::JoinHandle<()> {
    let topic = topic.to_owned();
    std::thread::spawn(move || {
        let producer = weir_tests::admin::producer(&[]);
        for chunk in rows.chunks(20) {
            for (key, value) in chunk {
                let record = BaseRecord::<str, str>::to(&topic).payload(value).key(key.as_deref().unwrap_or(""));
                weir_tests::admin::send_waiting(&producer, record);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        producer.flush(Duration::from_secs(30)).expect("flush the input");
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn two_tenants_stay_exact_through_a_server_kill_and_an_upgrade() {
    const PARTITIONS: i32 = 4;
    let mut serve = Serve::start("");
    let run = unique_name("weir-host");
    let rows = flight_rows(6_000);
    let (first, second) = rows.split_at(3_000);
    // `during` flows in while the server is killed; `after` only once it is back, so that each
    // pipeline provably works and commits on the restarted server (an idle pipeline commits
    // nothing, and a fast one could finish `during` before the kill).
    let (during, after) = second.split_at(1_500);
    let mut tenants = Vec::new();
    for name in ["acme", "globex"] {
        let prefix = format!("{run}-{name}.");
        let token = serve.tenant(name, &prefix, None);
        let (source, sink) = (format!("{prefix}flights"), format!("{prefix}delays"));
        produce(&source, PARTITIONS, &keyed(first)).await;
        tenants.push((name, token, source, sink));
    }
    // acme deploys with the client (which uploads the component it names); globex with HTTP.
    let (_, acme_token, acme_source, acme_sink) = &tenants[0];
    let dir = serve.dir.path().to_owned();
    let file = dir.join("acme.toml");
    let spec = flight_delays_spec(acme_source, acme_sink, None)
        .replace("transform = \"flight-delays\"\n", &format!("wasm = \"{}\"\n", plugin("flight-delays").display()));
    std::fs::write(&file, format!("name = \"delays\"\n{spec}")).expect("acme.toml");
    let (_, deployed) = client(&serve, acme_token, &["deploy", file.to_str().expect("path")]);
    assert!(deployed.contains("transform flight-delays version 1"), "{deployed}");
    let (_, globex_token, globex_source, globex_sink) = &tenants[1];
    let bytes = std::fs::read(plugin("flight-delays")).expect("flight-delays.wasm");
    let (status, uploaded) = serve.upload(globex_token, "flight-delays", bytes.clone());
    assert_eq!(status, 201, "{uploaded}");
    let spec = flight_delays_spec(globex_source, globex_sink, None);
    serve.ok("PUT", "/v1/pipelines/delays", globex_token, toml_body(&spec));
    client_lists_and_shows(&serve, acme_token, acme_sink);

    let mut readers: Vec<Reader> =
        tenants.iter().map(|(_, _, _, sink)| Reader::new(sink, PARTITIONS, Isolation::ReadCommitted)).collect();
    for reader in &mut readers {
        assert_eq!(reader.read_until(first.len(), RUN_TIMEOUT), first.len(), "{}", serve.log());
    }
    // Kill the server while `during` flows in, once some of it was committed.
    let mut feeders: Vec<_> = tenants.iter().map(|(_, _, source, _)| feed_slowly(source, keyed(during))).collect();
    for reader in &mut readers {
        assert!(reader.read_until(first.len() + 100, RUN_TIMEOUT) > first.len(), "{}", serve.log());
    }
    serve.kill();
    serve.spawn();
    feeders.extend(tenants.iter().map(|(_, _, source, _)| feed_slowly(source, keyed(after))));
    // globex upgrades to a second version of the transform while running.
    let (status, uploaded) = serve.upload(globex_token, "flight-delays", bytes);
    assert_eq!((status, uploaded["version"].as_u64()), (201, Some(2)), "{uploaded}");
    let spec = flight_delays_spec(globex_source, globex_sink, Some(2));
    let upgraded = serve.ok("PUT", "/v1/pipelines/delays", globex_token, toml_body(&spec));
    assert_eq!(upgraded["spec"]["transforms"][0]["version"], 2, "{upgraded}");
    for feeder in feeders {
        feeder.join().expect("feeder");
    }
    for ((name, token, _, _), reader) in tenants.iter().zip(&mut readers) {
        let read = reader.read_until(rows.len(), RUN_TIMEOUT);
        reader.drain(Duration::from_secs(2));
        let status = serve.ok("GET", "/v1/pipelines/delays", token, None);
        assert_eq!(read, rows.len(), "{name}: {status}\n{}", serve.log());
        let verdict = verify(&rows, &reader.records, 15);
        assert!(verdict.is_exactly_once(), "{name}: {verdict:?}\n{status}");
        assert_eq!(status["state"], "running", "{status}");
        // The log line follows the commit that made the last records readable: wait for it.
        let deadline = Instant::now() + RUN_TIMEOUT;
        let lines = loop {
            let logs = serve.ok("GET", "/v1/pipelines/delays/logs", token, None);
            let lines: Vec<String> =
                logs.as_array().expect("lines").iter().filter_map(|l| l["line"].as_str().map(str::to_owned)).collect();
            if lines.iter().any(|l| l.contains("checkpoint committed")) || Instant::now() > deadline {
                break lines;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(lines.iter().any(|l| l.contains("checkpoint committed")), "{name}'s log: {lines:?}");
        let other = if *name == "acme" { "globex" } else { "acme" };
        assert!(!lines.iter().any(|l| l.contains(&format!("{other}.delays"))), "{name} sees {other}'s log lines");
    }
    let log = serve.log();
    assert_eq!(log.matches("serving the API at").count(), 2, "the server was restarted once:\n{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_refuses_missing_bad_and_foreign_tokens_and_bad_specs() {
    let serve = Serve::start("");
    let run = unique_name("weir-auth");
    let a = serve.tenant("a", &format!("{run}-a."), Some(json!({ "max_pipelines": 1 })));
    let b = serve.tenant("b", &format!("{run}-b."), None);
    let bytes = std::fs::read(plugin("flight-delays")).expect("flight-delays.wasm");
    assert_eq!(serve.upload(&a, "flight-delays", bytes).0, 201);
    let (source, sink) = (format!("{run}-a.in"), format!("{run}-a.out"));
    weir_tests::create_topic(&source, 1).await;
    serve.ok("PUT", "/v1/pipelines/p", &a, toml_body(&flight_delays_spec(&source, &sink, None)));
    // Concurrent redeploys of one pipeline take turns: each stops the previous run before the
    // next starts (two runs at once would fight over the state directory's lock).
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope
                .spawn(|| serve.ok("PUT", "/v1/pipelines/p", &a, toml_body(&flight_delays_spec(&source, &sink, None))));
        }
    });
    wait_for_state(&serve, &a, "p", "running");
    std::thread::sleep(Duration::from_secs(2));
    let status = serve.ok("GET", "/v1/pipelines/p", &a, None);
    assert_eq!(status["state"], "running", "{status}");
    assert!(!serve.log().contains("lock"), "one run at a time:\n{}", serve.log());

    let forged = format!("weir_a_{}", "A".repeat(43));
    let tenant_routes = [
        ("GET", "/v1/transforms"),
        ("GET", "/v1/transforms/flight-delays"),
        ("PUT", "/v1/transforms/flight-delays"),
        ("DELETE", "/v1/transforms/flight-delays"),
        ("GET", "/v1/pipelines"),
        ("GET", "/v1/pipelines/p"),
        ("PUT", "/v1/pipelines/p"),
        ("POST", "/v1/pipelines/p/stop"),
        ("POST", "/v1/pipelines/p/start"),
        ("DELETE", "/v1/pipelines/p"),
        ("GET", "/v1/pipelines/p/logs"),
    ];
    let admin_routes = [
        ("GET", "/v1/tenants"),
        ("POST", "/v1/tenants"),
        ("DELETE", "/v1/tenants/a"),
        ("POST", "/v1/tenants/a/token"),
        ("DELETE", "/v1/tenants/a/token"),
    ];
    for (method, path) in tenant_routes.iter().chain(&admin_routes) {
        for token in [None, Some("nonsense"), Some(forged.as_str()), Some("weir_nobody_x")] {
            let (status, answer) = serve.call(method, path, token, None);
            assert_eq!(status, 401, "{method} {path} with {token:?}: {answer}");
            assert_eq!(answer["code"], "unauthorized", "{answer}");
        }
    }
    for (method, path) in &admin_routes {
        let (status, answer) = serve.call(method, path, Some(&a), None);
        assert_eq!(status, 403, "{method} {path} with a tenant's token: {answer}");
    }
    // b sees none of a's objects: each of a's is "not found" to it.
    for (method, path) in
        tenant_routes.iter().filter(|(_, p)| p.contains("/p/") || p.ends_with("/p") || p.contains("flight-delays"))
    {
        if *method == "PUT" {
            continue;
        }
        let (status, answer) = serve.call(method, path, Some(&b), None);
        assert_eq!(status, 404, "{method} {path} with the other tenant's token: {answer}");
    }
    assert_eq!(serve.ok("GET", "/v1/pipelines", &b, None), json!([]));

    // Specs: each refusal names the field.
    let good = flight_delays_spec(&source, &sink, None);
    let refused = [
        (good.replace(&sink, &format!("{run}-b.out")), "sink.topic", "outside"),
        (
            good.replace("[source]\n", &format!("[source]\nbrokers = \"{}\"\n", bootstrap())),
            "source.brokers",
            "set by the server",
        ),
        (format!("{good}\n[state]\ndir = \"/tmp\"\n"), "state.dir", "set by the server"),
        (good.replace("batch_size = 64", "batch_size = 64\nbogus = 1"), "source.bogus", "unknown key"),
        (
            good.replace("name = \"flight-delays\"", &format!("name = \"{}\"", "o".repeat(200))),
            "transforms[0].name",
            "1 to 128 characters",
        ),
        (good.replace("transform = \"flight-delays\"", "wasm = \"/etc/passwd\""), "transforms[0].wasm", "upload"),
        (
            good.replace("transform = \"flight-delays\"", "transform = \"nope\""),
            "transforms[0].transform",
            "no transform",
        ),
        (
            good.replace("name = \"flight-delays\"", "name = \"flight-delays\"\nmemory_limit_mb = 4096"),
            "transforms[0].memory_limit_mb",
            "quota",
        ),
        (format!("{good}\n[state]\nmax_bytes = {}\n", (1024 << 20) + 1), "state.max_bytes", "quota"),
        (format!("{good}\n[runtime]\nworkers = 64\n"), "runtime.workers", "quota"),
        (
            format!("{good}\n[sink.producer]\n\"queue.buffering.max.kbytes\" = 2000000\n"),
            "sink.producer.\"queue.buffering.max.kbytes\"",
            "max_total_memory_mb",
        ),
        (
            good.replace("batch_size = 64", "batch_size = 64\nconsumer = { \"plugin.library.paths\" = \"/tmp/x.so\" }"),
            "source.consumer.\"plugin.library.paths\"",
            "not open to tenants",
        ),
    ];
    for (spec, field, words) in refused {
        let (status, answer) = serve.call("PUT", "/v1/pipelines/p", Some(&a), toml_body(&spec));
        assert_eq!(status, 400, "{field}: {answer}");
        assert_eq!(answer["field"], field, "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{field}: {answer}");
        // The server checks the spec as it rebuilt it: a line would not be the body's.
        assert!(!message.contains("(line "), "{field}: {answer}");
    }
    // An answer quotes little of what was sent (a 100 KB key came back whole, twice): the field
    // is cut with a marker before the message names it, so the message still says what is wrong.
    let long_key = good.replace("batch_size = 64", &format!("batch_size = 64\n{} = 1", "k".repeat(100_000)));
    let (status, answer) = serve.call("PUT", "/v1/pipelines/p", Some(&a), toml_body(&long_key));
    let (text, message) = (answer.to_string(), answer["message"].as_str().unwrap_or_default());
    assert_eq!(status, 400, "{}", &text[..text.len().min(1000)]);
    assert!(text.len() < 2048, "an answer of {} bytes: {}", text.len(), &text[..text.len().min(1000)]);
    assert!(message.contains("[truncated: ") && message.contains("unknown key"), "{message}");
    // A spec within the body limit whose registry record is not: 413 naming the record, not
    // 503 as if the broker were down; the spec deployed stays.
    let note = "x".repeat(1_010_000);
    let bulky = good.replace(
        "transform = \"flight-delays\"\n",
        &format!("transform = \"flight-delays\"\nconfig = {{ note = '{note}' }}\n"),
    );
    assert!(bulky.len() < 1 << 20, "within the body limit");
    let (status, answer) = serve.call("PUT", "/v1/pipelines/p", Some(&a), toml_body(&bulky));
    assert_eq!((status, answer["code"].as_str()), (413, Some("too_large")), "{answer}");
    assert!(answer["message"].as_str().unwrap_or_default().contains("pipeline/a/p"), "{answer}");
    let deployed = serve.ok("GET", "/v1/pipelines/p", &a, None).to_string();
    assert!(!deployed.contains("xxxxxxxx"), "the spec deployed stays");
    // Quotas out of range, and names that would read as options on the command line.
    for (request, field) in [
        (
            json!({ "name": "c", "topic_prefix": format!("{run}-c."), "quotas": { "cpu_percent": 0 } }),
            "quotas.cpu_percent",
        ),
        (
            json!({ "name": "c", "topic_prefix": format!("{run}-c."), "quotas": { "max_total_memory_mb": 8, "max_memory_mb": 16 } }),
            "quotas.max_total_memory_mb",
        ),
        (json!({ "name": "c", "topic_prefix": format!("{run}-c."), "quotas": { "bogus": 1 } }), "quotas"),
        (json!({ "name": "-c", "topic_prefix": format!("{run}-c.") }), "name"),
    ] {
        let body = Some(("application/json", request.to_string().into_bytes()));
        let (status, answer) = serve.call("POST", "/v1/tenants", Some(ADMIN), body);
        assert_eq!((status, answer["field"].as_str()), (400, Some(field)), "{answer}");
    }
    // Kafka takes `.` and `_` in topic names as the same: a prefix differing only there overlaps.
    let request = json!({ "name": "c", "topic_prefix": format!("{run}-a_") }).to_string().into_bytes();
    let (status, answer) = serve.call("POST", "/v1/tenants", Some(ADMIN), Some(("application/json", request)));
    assert_eq!((status, answer["field"].as_str()), (400, Some("topic_prefix")), "{answer}");
    let (status, answer) = serve.call("PUT", "/v1/pipelines/q", Some(&a), toml_body(&good));
    assert_eq!((status, answer["code"].as_str()), (403, Some("quota")), "{answer}");
    let (status, answer) = serve.call("DELETE", "/v1/transforms/flight-delays", Some(&a), None);
    assert_eq!(status, 409, "a transform in use cannot be deleted: {answer}");

    // Rotation and revocation take effect at once.
    let rotated = serve.ok("POST", "/v1/tenants/a/token", ADMIN, None)["token"].as_str().expect("token").to_owned();
    assert_eq!(serve.call("GET", "/v1/pipelines", Some(&a), None).0, 401, "the old token is refused after rotation");
    assert_eq!(serve.call("GET", "/v1/pipelines", Some(&rotated), None).0, 200);
    serve.ok("DELETE", "/v1/tenants/b/token", ADMIN, None);
    assert_eq!(serve.call("GET", "/v1/pipelines", Some(&b), None).0, 401, "a revoked token is refused");
    let described = serve.call("GET", "/v1/openapi.json", None, None).1;
    assert!(described["paths"]["/v1/pipelines/{name}"].is_object(), "{described}");
    serve.ok("DELETE", "/v1/pipelines/p", &rotated, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_uploads_get_a_4xx_and_the_server_stays_up() {
    let serve = Serve::start("max_upload_mb = 1");
    let run = unique_name("weir-hostile");
    let token = serve.tenant("t", &format!("{run}-t."), None);
    let random: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let core_module = b"\0asm\x01\0\0\0".to_vec();
    let mut over_cap = b"\0asm\x0d\0\x01\0".to_vec();
    over_cap.resize(2 << 20, 0);
    let wrong_version = std::fs::read(plugin("wrong-version")).expect("wrong-version.wasm");
    let cases = [
        (random, 422, "not a WebAssembly"),
        (core_module, 422, "core WebAssembly module"),
        (over_cap, 413, "max_upload_mb"),
        (wrong_version, 422, "weir:transform@1.0.0"),
    ];
    for (bytes, expected, words) in cases {
        let (status, answer) = serve.upload(&token, "x", bytes);
        assert_eq!(status, expected, "{words}: {answer}");
        assert!(answer["message"].as_str().unwrap_or_default().contains(words), "{words}: {answer}");
        assert_eq!(serve.ok("GET", "/v1/transforms", &token, None), json!([]), "nothing was stored");
    }
    assert!(no_components(&serve), "refused uploads leave no file behind");
    // Storage per tenant is bounded (issue 44 item 6: 30 × 8 MiB were all accepted): by count
    // of versions, and by bytes, before anything is compiled or stored.
    let passthrough = std::fs::read(plugin("passthrough")).expect("passthrough.wasm");
    let few = serve.tenant("few", &format!("{run}-few."), Some(json!({ "max_transform_versions": 2 })));
    let small = serve.tenant("small", &format!("{run}-small."), Some(json!({ "max_transform_mb": 1 })));
    let dedup = std::fs::read(plugin("dedup")).expect("dedup.wasm");
    let storage =
        [(&few, vec![&passthrough; 3], "max_transform_versions"), (&small, vec![&dedup; 5], "max_transform_mb")];
    for (token, uploads, quota) in storage {
        let answers: Vec<(u16, Value)> = uploads
            .iter()
            .enumerate()
            .map(|(i, bytes)| serve.upload(token, &format!("x{i}"), (*bytes).clone()))
            .collect();
        let (last, accepted) = answers.split_last().expect("uploads");
        assert!(accepted.iter().all(|(status, _)| *status == 201), "{quota}: {answers:?}");
        assert_eq!((last.0, last.1["field"].as_str()), (403, Some(quota)), "{quota}: {answers:?}");
        let stored = serve.ok("GET", "/v1/transforms", token, None);
        assert_eq!(stored.as_array().map(Vec::len), Some(accepted.len()), "{quota}: {stored}");
    }
    // A component that takes longer than compile_timeout_ms to compile (a fresh data directory:
    // nothing is cached) is refused; the server stays up.
    let serve = Serve::start("compile_timeout_ms = 1");
    let token = serve.tenant("t", &format!("{run}-slow."), None);
    let (status, answer) =
        serve.upload(&token, "x", std::fs::read(plugin("flight-delays")).expect("flight-delays.wasm"));
    assert_eq!(status, 422, "{answer}");
    assert!(answer["message"].as_str().unwrap_or_default().contains("compile_timeout_ms"), "{answer}");
    assert_eq!(serve.ok("GET", "/v1/transforms", &token, None), json!([]));
    assert!(no_components(&serve), "a refused upload leaves no file behind");
}

fn no_components(serve: &Serve) -> bool {
    serve.dir.path().join("data/components").read_dir().map_or(true, |d| d.filter_map(Result::ok).next().is_none())
}

/// Polls pipeline `name` of `token`'s tenant until its state is `state`; returns its status.
fn wait_for_state(serve: &Serve, token: &str, name: &str, state: &str) -> Value {
    let started = Instant::now();
    loop {
        let status = serve.ok("GET", &format!("/v1/pipelines/{name}"), token, None);
        if status["state"] == state {
            return status;
        }
        assert!(started.elapsed() < RUN_TIMEOUT, "{name} never became {state}: {status}\n{}", serve.log());
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn noisy_guests_fail_for_good_while_a_neighbour_stays_exact() {
    let serve = Serve::start("max_identical_failures = 2");
    let run = unique_name("weir-noisy");
    let noisy = serve.tenant("noisy", &format!("{run}-n."), Some(json!({ "max_state_mb": 1 })));
    let quiet = serve.tenant("quiet", &format!("{run}-q."), None);
    let misbehave = std::fs::read(plugin("misbehave")).expect("misbehave.wasm");
    assert_eq!(serve.upload(&noisy, "misbehave", misbehave).0, 201);
    // `fill` stores 64 KiB of state per record: 20 of them pass the 1 MiB quota.
    for (name, word, count) in [
        ("loops", "loop", 1),
        ("eats-memory", "alloc", 1),
        ("fails", "error", 1),
        ("fails-loudly", "error-huge", 1),
        ("hoards", "fill", 20),
    ] {
        let (source, sink) = (format!("{run}-n.{name}-in"), format!("{run}-n.{name}-out"));
        produce(&source, 1, &vec![(None, word.to_owned()); count]).await;
        let spec = format!(
            "[source]\ntopics = [\"{source}\"]\n[[transforms]]\nname = \"m\"\ntransform = \"misbehave\"\n\
             memory_limit_mb = 16\ndeadline_ms = 300\n[sink]\ntopic = \"{sink}\"\ncreate_topics = true\n"
        );
        serve.ok("PUT", &format!("/v1/pipelines/{name}"), &noisy, toml_body(&spec));
    }
    let rows = flight_rows(3_000);
    let (source, sink) = (format!("{run}-q.flights"), format!("{run}-q.delays"));
    produce(&source, 2, &keyed(&rows)).await;
    let bytes = std::fs::read(plugin("flight-delays")).expect("flight-delays.wasm");
    assert_eq!(serve.upload(&quiet, "flight-delays", bytes).0, 201);
    serve.ok("PUT", "/v1/pipelines/delays", &quiet, toml_body(&flight_delays_spec(&source, &sink, None)));

    let mut reader = Reader::new(&sink, 2, Isolation::ReadCommitted);
    assert_eq!(reader.read_until(rows.len(), RUN_TIMEOUT), rows.len(), "{}", serve.log());
    reader.drain(Duration::from_secs(1));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
    // A guest's failure is retried until max_identical_failures; a quota breach stops at once (the
    // same input writes the same state).
    let failures = [
        ("loops", "deadline", true),
        ("eats-memory", "memory", true),
        ("fails", "misbehave: error at offset 0", true),
        ("fails-loudly", "misbehave: huge huge", true),
        ("hoards", "state quota exceeded", false),
    ];
    for (name, words, retried) in failures {
        let status = wait_for_state(&serve, &noisy, name, "failed");
        let error = status["last_error"].as_str().unwrap_or_default();
        assert!(error.contains(words), "{name}: {status}");
        let logs = serve.ok("GET", &format!("/v1/pipelines/{name}/logs"), &noisy, None);
        assert_eq!(logs.to_string().contains("times in a row; giving up"), retried, "{name}: {logs}");
    }
    assert_eq!(serve.ok("GET", "/v1/pipelines/delays", &quiet, None)["state"], "running");
    // A guest's 1 MB error message is cut, as a log line is, wherever it lands (issue 44 item 6):
    // its status, the server's log.
    let status = serve.ok("GET", "/v1/pipelines/fails-loudly", &noisy, None);
    let error = status["last_error"].as_str().unwrap_or_default();
    assert!(
        error.len() < 8192 && error.contains("[truncated: "),
        "{} bytes: {}",
        error.len(),
        &error[..200.min(error.len())]
    );
    let log = serve.log();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(
        log.contains("misbehave: huge huge") && longest < 16 * 1024,
        "the server log has a line of {longest} bytes"
    );
    // The noisy tenant's looping guest was metered against its CPU share.
    let metrics = serve.ok("GET", "/metrics", &noisy, None);
    let metrics = metrics.as_str().expect("metrics text");
    let cpu = metrics
        .lines()
        .find_map(|line| line.strip_prefix("weir_tenant_cpu_seconds_total{tenant=\"noisy\"} "))
        .and_then(|value| value.parse::<f64>().ok());
    assert!(cpu.is_some_and(|seconds| seconds > 0.1), "{metrics}");
}

/// A tenant's uncommitted state is memory of its pool (issue 44 item 6): a pipeline whose epoch
/// would hold more state than `max_total_memory_mb` (here 96 MiB, with `checkpoint.interval_ms`
/// at 10 min and `max_epoch_bytes` at 1 GiB, so only the pool ends its epochs) checkpoints early
/// and waits for each commit. More output than fits the quota at once arrives long before the
/// interval, and the tenant's memory, overlays included, stays within the quota while it runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_uncommitted_state_counts_against_its_memory_quota() {
    const LIMIT_MB: u64 = 96;
    let serve = Serve::start("");
    let run = unique_name("weir-overlay");
    let token = serve.tenant("hoarder", &format!("{run}."), Some(json!({ "max_total_memory_mb": LIMIT_MB })));
    let misbehave = std::fs::read(plugin("misbehave")).expect("misbehave.wasm");
    assert_eq!(serve.upload(&token, "misbehave", misbehave).0, 201);
    // `fill` stores 64 KiB per record: 3,000 of them are 188 MiB of state; batches of 8 keep
    // what the workers hold at once (16 batches per worker) to 16 MiB.
    let count = 3_000;
    let (source, sink) = (format!("{run}.fill-in"), format!("{run}.fill-out"));
    produce(&source, 1, &vec![(None, "fill".to_owned()); count]).await;
    let spec = format!(
        "[source]\ntopics = [\"{source}\"]\nbatch_size = 8\n[[transforms]]\nname = \"m\"\n\
         transform = \"misbehave\"\nmemory_limit_mb = 16\n[sink]\ntopic = \"{sink}\"\ncreate_topics = true\n\
         transaction_timeout_ms = 800000\n[checkpoint]\ninterval_ms = 600000\nmax_epoch_bytes = 1073741824\n"
    );
    serve.ok("PUT", "/v1/pipelines/hoards", &token, toml_body(&spec));

    let memory =
        |serve: &Serve| {
            let metrics = serve.ok("GET", "/metrics", ADMIN, None);
            metrics.as_str().expect("metrics text").lines().find_map(|line| {
                line.strip_prefix("weir_tenant_memory_bytes{tenant=\"hoarder\"} ")?.parse::<f64>().ok()
            })
        };
    let done = std::sync::atomic::AtomicBool::new(false);
    let (read, most) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut most = 0f64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(memory(&serve).unwrap_or(0.0));
                std::thread::sleep(Duration::from_millis(50));
            }
            most
        });
        let mut reader = Reader::new(&sink, 1, Isolation::ReadCommitted);
        // 2,000 records hold 125 MiB of state: more than the quota.
        reader.read_until(2_000, RUN_TIMEOUT);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (reader, sampler.join().expect("the sampler"))
    });
    let early = read.records.len();
    assert!(early >= 2_000, "only {early} records before checkpoint.interval_ms\n{}", serve.log());
    let limit = (LIMIT_MB << 20) as f64;
    assert!(most <= limit, "the tenant held {most} bytes, above its {limit}");
    assert!(most > limit / 3.0, "the overlays were not counted: at most {most} bytes of {limit}");
    assert_eq!(serve.ok("GET", "/v1/pipelines/hoards", &token, None)["state"], "running");
}

/// Records a tenant's pipelines read and have not processed yet are memory of its pool (issue 44
/// item 6): a pipeline whose guests run at 2 % of a core, over 60 MiB of 256 KiB records, with
/// batches of up to 1,000 of them (which let 32,000 records, 8 GiB, wait by number alone) and a
/// librdkafka queue of 64 MiB that fills while the guests work (so each round finds more records
/// at hand than the bound: about 64 MiB, as the same test with a 1 GiB quota read), reads until
/// they hold a quarter of the tenant's 64 MiB, and no further. Its output is exact, and once it
/// is done nothing stays counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_records_read_ahead_count_against_its_memory_quota() {
    const LIMIT_MB: u64 = 64;
    const RECORD: usize = 256 << 10;
    const COUNT: usize = 240;
    let serve = Serve::start("");
    let run = unique_name("weir-readahead");
    let quotas = json!({ "max_total_memory_mb": LIMIT_MB, "cpu_percent": 2 });
    let token = serve.tenant("reader", &format!("{run}."), Some(quotas));
    let misbehave = std::fs::read(plugin("misbehave")).expect("misbehave.wasm");
    assert_eq!(serve.upload(&token, "misbehave", misbehave).0, 201);
    let (source, sink) = (format!("{run}.big-in"), format!("{run}.big-out"));
    let records: Vec<_> = (0..COUNT).map(|i| (Some(format!("k{i}")), format!("{i:06}").repeat(RECORD / 6))).collect();
    produce(&source, 2, &records).await;
    let spec = format!(
        "[source]\ntopics = [\"{source}\"]\nbatch_size = 1000\n[source.consumer]\n\
         \"queued.max.messages.kbytes\" = \"65536\"\n\"max.partition.fetch.bytes\" = \"4194304\"\n[[transforms]]\nname = \"m\"\n\
         transform = \"misbehave\"\n[sink]\ntopic = \"{sink}\"\ncreate_topics = true\n[runtime]\nworkers = 2\n"
    );
    serve.ok("PUT", "/v1/pipelines/reads", &token, toml_body(&spec));

    let read = read_within_a_quarter(&serve, "reader", &sink, COUNT, LIMIT_MB, RECORD);
    let mut values: Vec<_> = read.into_iter().map(|record| record.value).collect();
    values.sort();
    let mut sent: Vec<_> = records.into_iter().map(|(_, value)| Some(value)).collect();
    sent.sort();
    assert!(values == sent, "{} records out of {COUNT}, or not the ones sent\n{}", values.len(), serve.log());
}

/// Table rows joined onto records read are memory of those records (issue 44 item 6): 200 small
/// records each joined with a 256 KiB row (50 MiB joined, which one batch of 1,000 would have
/// held) are read until they hold a quarter of the tenant's 64 MiB, as records' own bytes are.
#[tokio::test(flavor = "multi_thread")]
async fn table_rows_joined_onto_records_read_count_against_the_memory_quota() {
    const LIMIT_MB: u64 = 64;
    const ROW: usize = 256 << 10;
    const COUNT: usize = 200;
    let serve = Serve::start("");
    let run = unique_name("weir-joinahead");
    let quotas = json!({ "max_total_memory_mb": LIMIT_MB, "cpu_percent": 2 });
    let token = serve.tenant("joiner", &format!("{run}."), Some(quotas));
    let passthrough = std::fs::read(plugin("passthrough")).expect("passthrough.wasm");
    assert_eq!(serve.upload(&token, "passthrough", passthrough).0, 201);
    let (source, table, sink) = (format!("{run}.in"), format!("{run}.rows"), format!("{run}.out"));
    let rows: Vec<_> = (0..4).map(|i| (Some(format!("k{i}")), format!("{i}").repeat(ROW))).collect();
    produce(&table, 1, &rows).await;
    let records: Vec<_> = (0..COUNT).map(|i| (None, format!(r#"{{"id":"k{}","n":{i}}}"#, i % 4))).collect();
    produce(&source, 2, &records).await;
    let spec = format!(
        "[source]\ntopics = [\"{source}\"]\nbatch_size = 1000\n[[source.tables]]\nname = \"rows\"\n\
         topic = \"{table}\"\nkey_fields = [\"id\"]\n[[transforms]]\nname = \"p\"\ntransform = \"passthrough\"\n\
         [sink]\ntopic = \"{sink}\"\ncreate_topics = true\n[runtime]\nworkers = 2\n"
    );
    serve.ok("PUT", "/v1/pipelines/joins", &token, toml_body(&spec));
    let read = read_within_a_quarter(&serve, "joiner", &sink, COUNT, LIMIT_MB, ROW);
    let mut values: Vec<_> = read.into_iter().filter_map(|record| record.value).collect();
    values.sort();
    let mut sent: Vec<_> = records.into_iter().map(|(_, value)| value).collect();
    sent.sort();
    assert!(values == sent, "{} records out of {COUNT}, or not the ones sent\n{}", values.len(), serve.log());
}

/// Reads `count` records of `sink` (2 partitions) while sampling tenant `tenant`'s gauges every
/// 20 ms; returns them once all are there. Asserts that the records its pipelines read reached
/// a quarter of its `limit_mb` (the scenario happened) and stayed there but for a batch (a
/// sixteenth of the pool, its buffers doubling) and a few `record`s, that its memory stayed
/// within the limit, and that the reads are all given back once done.
fn read_within_a_quarter(
    serve: &Serve,
    tenant: &str,
    sink: &str,
    count: usize,
    limit_mb: u64,
    record: usize,
) -> Vec<weir_tests::Consumed> {
    let gauge = |name: &str| {
        let metrics = serve.ok("GET", "/metrics", ADMIN, None);
        let prefix = format!("{name}{{tenant=\"{tenant}\"}} ");
        metrics.as_str().expect("metrics text").lines().find_map(|line| line.strip_prefix(&prefix)?.parse::<f64>().ok())
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let (read, (most_read, most_memory)) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let (mut read, mut memory) = (0f64, 0f64);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                read = read.max(gauge("weir_tenant_read_bytes").unwrap_or(0.0));
                memory = memory.max(gauge("weir_tenant_memory_bytes").unwrap_or(0.0));
                std::thread::sleep(Duration::from_millis(20));
            }
            (read, memory)
        });
        let mut reader = Reader::new(sink, 2, Isolation::ReadCommitted);
        reader.read_until(count, RUN_TIMEOUT);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (reader.records, sampler.join().expect("the sampler"))
    });
    let (limit, quarter) = ((limit_mb << 20) as f64, (limit_mb << 20) as f64 / 4.0);
    assert!(most_read >= quarter, "the reads never held a quarter of the pool: at most {most_read} bytes");
    let over = limit / 16.0 + (record << 2) as f64;
    assert!(most_read <= quarter + over, "the reads held {most_read} bytes, above {quarter} and a batch");
    assert!(most_memory <= limit, "the tenant held {most_memory} bytes, above its {limit}");
    eventually("the reads all given back", || gauge("weir_tenant_read_bytes") == Some(0.0), &|| serve.log());
    read
}

/// A table is memory of its tenant's pool (issue 44 item 6): a pipeline joining a table of
/// 24 MiB (96 keys of 256 KiB, within its own `max_mb`) for a tenant of 16 MiB stops at start,
/// naming the quota and the table, and gives back what the table had taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_larger_than_its_tenants_memory_stops_the_pipeline_naming_the_quota() {
    let serve = Serve::start("");
    let run = unique_name("weir-bigtable");
    let quotas = json!({ "max_total_memory_mb": 16, "max_memory_mb": 16 });
    let token = serve.tenant("joiner", &format!("{run}."), Some(quotas));
    let passthrough = std::fs::read(plugin("passthrough")).expect("passthrough.wasm");
    assert_eq!(serve.upload(&token, "passthrough", passthrough).0, 201);
    let (source, table, sink) = (format!("{run}.in"), format!("{run}.rows"), format!("{run}.out"));
    let rows: Vec<_> = (0..96).map(|i| (Some(format!("k{i}")), "r".repeat(256 << 10))).collect();
    produce(&table, 1, &rows).await;
    produce(&source, 1, &[(None, r#"{"id":"k1"}"#.to_owned())]).await;
    let spec = format!(
        "[source]\ntopics = [\"{source}\"]\n[[source.tables]]\nname = \"rows\"\ntopic = \"{table}\"\n\
         key_fields = [\"id\"]\nmax_mb = 64\n[[transforms]]\nname = \"p\"\ntransform = \"passthrough\"\n\
         memory_limit_mb = 8\n[sink]\ntopic = \"{sink}\"\ncreate_topics = true\n"
    );
    serve.ok("PUT", "/v1/pipelines/joins", &token, toml_body(&spec));
    let stopped = || {
        let status = serve.ok("GET", "/v1/pipelines/joins", &token, None);
        let error = status["last_error"].as_str().unwrap_or_default().to_owned();
        error.contains("max_total_memory_mb").then_some(error)
    };
    let started = Instant::now();
    let error = loop {
        if let Some(error) = stopped() {
            break error;
        }
        assert!(started.elapsed() < RUN_TIMEOUT, "the pipeline never stopped on its table\n{}", serve.log());
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(error.contains("table rows") && error.contains("tenant `joiner`"), "{error}");
    let memory = || {
        let metrics = serve.ok("GET", "/metrics", ADMIN, None);
        metrics
            .as_str()
            .expect("metrics text")
            .lines()
            .find_map(|line| line.strip_prefix("weir_tenant_memory_bytes{tenant=\"joiner\"} ")?.parse::<f64>().ok())
    };
    // The rows read before the refusal went back with the table (the guest's memory may stay).
    eventually("the table's memory given back", || memory().is_some_and(|bytes| bytes < 8.0 * 1048576.0), &|| {
        serve.log()
    });
}

/// An idle pipeline's guests give their memory to its tenant's busy one (issue 44 item 6): a
/// tenant of 12 MiB runs a pipeline of 8 partitions (8 instances of `memory-counter`, which keeps
/// a count per instance in memory) that goes idle holding most of it; a second such pipeline
/// cannot start its instances until the first drops its own, which it does once the pool has
/// refused memory (or once idle for 30 s). Then the first, fed again, waits for the idle second in turn, and its counts
/// go on from its snapshots: each partition's second record is its `2`.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_pipelines_guests_give_their_memory_to_the_tenants_busy_one() {
    const PARTITIONS: i32 = 8;
    let serve = Serve::start("");
    let run = unique_name("weir-idle");
    let quotas = json!({ "max_total_memory_mb": 12, "max_memory_mb": 12 });
    let token = serve.tenant("idler", &format!("{run}."), Some(quotas));
    let counter = std::fs::read(plugin("memory-counter")).expect("memory-counter.wasm");
    assert_eq!(serve.upload(&token, "counter", counter).0, 201);
    let memory = || {
        let metrics = serve.ok("GET", "/metrics", ADMIN, None);
        metrics
            .as_str()
            .expect("metrics text")
            .lines()
            .find_map(|line| line.strip_prefix("weir_tenant_memory_bytes{tenant=\"idler\"} ")?.parse::<f64>().ok())
    };
    // Deploys pipeline `name`, feeds each partition one record and waits for each to say
    // `count`.
    let feed = |name: &str, count: &str, reader: &mut Reader| {
        let source = format!("{run}.{name}-in");
        for partition in 0..PARTITIONS {
            weir_tests::admin::produce_to(&source, partition, &[format!("{name}-{partition}")]);
        }
        let before = reader.records.len();
        reader.read_until(before + PARTITIONS as usize, RUN_TIMEOUT);
        let counts: Vec<_> = reader.records[before..].iter().filter_map(|r| r.value.as_deref()).collect();
        assert!(
            counts.len() == PARTITIONS as usize && counts.iter().all(|c| *c == count),
            "{name}: counts {counts:?}, not one {count} per partition\n{}",
            serve.log()
        );
    };
    let mut readers = Vec::new();
    for name in ["first", "second"] {
        let (source, sink) = (format!("{run}.{name}-in"), format!("{run}.{name}-out"));
        weir_tests::create_topic(&source, PARTITIONS).await;
        let spec = format!(
            "[source]\ntopics = [\"{source}\"]\n[[transforms]]\nname = \"c\"\ntransform = \"counter\"\n\
             memory_limit_mb = 4\n[sink]\ntopic = \"{sink}\"\ncreate_topics = true\n"
        );
        serve.ok("PUT", &format!("/v1/pipelines/{name}"), &token, toml_body(&spec));
        let mut reader = Reader::new(&sink, PARTITIONS, Isolation::ReadCommitted);
        feed(name, "1", &mut reader);
        if name == "first" {
            // The scenario: the idle first pipeline holds more than the second can start beside.
            let held = memory().unwrap_or(0.0);
            assert!(held > 6.0 * 1048576.0, "the first pipeline holds only {held} bytes\n{}", serve.log());
        }
        readers.push(reader);
    }
    // For want of memory as a rule; after 30 s idle when the second took that long to start.
    let log = serve.log();
    assert!(log.contains("idle: dropped the guests' instances"), "the first pipeline kept its instances\n{log}");
    feed("first", "2", &mut readers[0]);
}

/// A node's memory at start does not grow with the components it reads (issue 44 item 6): a
/// second node reads 160 MiB of components from the registry topic, keeping their chunks on
/// disk until it writes each component, and its peak resident memory stays below what it read.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_reads_every_component_at_start_without_holding_them_in_memory() {
    const COMPONENTS: usize = 10;
    const PADDING: usize = 16 << 20;
    let first = Serve::start("");
    let run = unique_name("weir-startmem");
    let token = first.tenant("big", &format!("{run}."), Some(json!({ "max_transform_mb": 512 })));
    let misbehave = std::fs::read(plugin("misbehave")).expect("misbehave.wasm");
    for index in 0..COMPONENTS {
        // The same component with a custom section (id 0: LEB128 size, name, bytes) of its own.
        let mut bytes = misbehave.clone();
        let name = format!("padding-{index}");
        let mut section = vec![name.len() as u8];
        section.extend_from_slice(name.as_bytes());
        section.extend(std::iter::repeat_n(index as u8, PADDING));
        bytes.push(0);
        let mut size = section.len();
        while size >= 0x80 {
            bytes.push((size as u8 & 0x7f) | 0x80);
            size >>= 7;
        }
        bytes.push(size as u8);
        bytes.extend_from_slice(&section);
        let (status, answer) = first.upload(&token, &format!("big-{index}"), bytes);
        assert_eq!(status, 201, "{answer}");
    }
    let second = first.another_node("node-2");
    let listed = || {
        let (status, answer) = second.call("GET", "/v1/transforms", Some(&token), None);
        status == 200 && answer.as_array().is_some_and(|all| all.len() == COMPONENTS)
    };
    eventually("node 2 listing every transform", listed, &|| second.log());
    let pid = second.child.as_ref().expect("node 2 runs").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let peak_kib: usize = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:")?.trim().strip_suffix("kB")?.trim().parse().ok())
        .expect("VmHWM");
    let read = COMPONENTS * PADDING;
    assert!(peak_kib * 1024 < read, "node 2 peaked at {peak_kib} KiB reading {read} bytes of components");
    let components = std::fs::read_dir(second.dir.path().join("data/components")).expect("components").count();
    assert_eq!(components, COMPONENTS, "node 2 wrote every component");
}

/// Polls `check` every 250 ms until it holds; panics naming `what` after [`RUN_TIMEOUT`].
fn eventually(what: &str, mut check: impl FnMut() -> bool, logs: &dyn Fn() -> String) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < RUN_TIMEOUT, "{what} never happened\n{}", logs());
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Two nodes sharing a registry topic serve the same tenants, transforms and pipelines: what one
/// node is asked reaches the other within a moment, and both run the pipeline as members of its
/// consumer group, sharing its partitions, with the output exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn two_nodes_share_tenants_and_pipelines_through_the_registry_topic() {
    const PARTITIONS: i32 = 4;
    let first = Serve::start("");
    let second = first.another_node("node-2");
    let logs = || format!("node-1:\n{}\nnode-2:\n{}", first.log(), second.log());
    let run = unique_name("weir-nodes");
    let token = first.tenant("acme", &format!("{run}."), None);
    eventually(
        "the tenant reaching node 2",
        || second.call("GET", "/v1/pipelines", Some(&token), None).0 == 200,
        &logs,
    );

    // Uploaded to node 2, deployed through node 1: node 1 writes the component from its chunks.
    let bytes = std::fs::read(plugin("flight-delays")).expect("flight-delays.wasm");
    assert_eq!(second.upload(&token, "flight-delays", bytes).0, 201);
    eventually(
        "the transform reaching node 1",
        || first.call("GET", "/v1/transforms/flight-delays", Some(&token), None).0 == 200,
        &logs,
    );
    let (source, sink) = (format!("{run}.flights"), format!("{run}.delays"));
    weir_tests::create_topic(&source, PARTITIONS).await;
    first.ok("PUT", "/v1/pipelines/delays", &token, toml_body(&flight_delays_spec(&source, &sink, None)));
    let assigned = |node: &Serve| {
        let (status, logs) = node.call("GET", "/v1/pipelines/delays/logs", Some(&token), None);
        status == 200 && logs.to_string().contains("partitions assigned by the consumer group")
    };
    eventually("node 2 running the pipeline", || assigned(&second), &logs);
    eventually("node 1 running the pipeline", || assigned(&first), &logs);

    let rows = flight_rows(4_000);
    produce(&source, PARTITIONS, &keyed(&rows)).await;
    let mut reader = Reader::new(&sink, PARTITIONS, Isolation::ReadCommitted);
    assert_eq!(reader.read_until(rows.len(), RUN_TIMEOUT), rows.len(), "{}", logs());
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
    for (name, node) in [("node 1", &first), ("node 2", &second)] {
        let status = node.ok("GET", "/v1/pipelines/delays", &token, None);
        let records = status["metrics"]["records_in"].as_u64().unwrap_or(0);
        assert!(records > 0, "{name} processed none of the flights: {status}\n{}", logs());
    }

    // A stop through node 2 stops node 1's run; a delete through node 1 removes node 2's.
    second.ok("POST", "/v1/pipelines/delays/stop", &token, None);
    eventually(
        "node 1 stopping the pipeline",
        || first.ok("GET", "/v1/pipelines/delays", &token, None)["state"] == "stopped",
        &logs,
    );
    first.ok("DELETE", "/v1/pipelines/delays", &token, None);
    eventually(
        "node 2 forgetting the pipeline",
        || second.ok("GET", "/v1/pipelines", &token, None) == json!([]),
        &logs,
    );
    // A token rotated on one node stops working on the other.
    let rotated = first.ok("POST", "/v1/tenants/acme/token", ADMIN, None)["token"].as_str().expect("token").to_owned();
    eventually(
        "node 2 refusing the old token",
        || second.call("GET", "/v1/pipelines", Some(&token), None).0 == 401,
        &logs,
    );
    assert_eq!(second.call("GET", "/v1/pipelines", Some(&rotated), None).0, 200);
}

/// A pipeline whose stop takes long (its guest is in a 30 s call) holds up neither the node's
/// registry (a token revoked through the other node stops working at once) nor other
/// pipelines' requests.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_stop_holds_up_neither_the_registry_nor_other_pipelines() {
    let first = Serve::start("");
    let second = first.another_node("node-2");
    let logs = || format!("node-1:\n{}\nnode-2:\n{}", first.log(), second.log());
    let run = unique_name("weir-slow");
    let slow = first.tenant("slow", &format!("{run}-s."), Some(json!({ "max_deadline_ms": 60000 })));
    let other = first.tenant("other", &format!("{run}-o."), None);
    let misbehave = std::fs::read(plugin("misbehave")).expect("misbehave.wasm");
    assert_eq!(first.upload(&slow, "misbehave", misbehave.clone()).0, 201);
    assert_eq!(first.upload(&other, "misbehave", misbehave).0, 201);
    let (source, sink) = (format!("{run}-s.in"), format!("{run}-s.out"));
    weir_tests::create_topic(&source, 2).await;
    let spec = format!(
        "[source]\ntopics = [\"{source}\"]\n[[transforms]]\nname = \"m\"\ntransform = \"misbehave\"\n\
         deadline_ms = 40000\n[sink]\ntopic = \"{sink}\"\ncreate_topics = true\n"
    );
    first.ok("PUT", "/v1/pipelines/p", &slow, toml_body(&spec));
    let assigned = |node: &Serve| {
        let (status, logs) = node.call("GET", "/v1/pipelines/p/logs", Some(&slow), None);
        status == 200 && logs.to_string().contains("partitions assigned by the consumer group")
    };
    eventually("node 2 running the pipeline", || assigned(&second), &logs);
    // One partition each (one node gave one up), so that both nodes' guests sleep 30 s.
    eventually(
        "a node giving up a partition",
        || first.log().contains("kept=1") || second.log().contains("kept=1"),
        &logs,
    );
    // Keys spread over both partitions (murmur2, as Kafka's default partitioner).
    let sleeps: Vec<_> =
        ["a", "b", "c", "d", "e", "f", "g", "h"].iter().map(|k| (Some((*k).to_owned()), "sleep".to_owned())).collect();
    produce(&source, 2, &sleeps).await;
    eventually(
        "both nodes in the guest's sleep",
        || [&first, &second].iter().all(|node| node.log().contains("misbehave: sleeping 30 s")),
        &logs,
    );
    // The stop through node 1 waits for its own guest; node 2 hears of it through the registry.
    let stopping = std::thread::scope(|scope| {
        let stop = scope.spawn(|| first.ok("POST", "/v1/pipelines/p/stop", &slow, None));
        let stopped =
            |node: &Serve| node.log().contains("pipeline{pipeline=slow.p}: weir::server::supervisor: stopped");
        eventually(
            "node 2 beginning to stop",
            || second.log().contains("stopping a pipeline stopped or deleted"),
            &logs,
        );
        // Another tenant's deploy through node 1 does not wait for that stop.
        let other_spec = format!(
            "[source]\ntopics = [\"{run}-o.in\"]\n[[transforms]]\nname = \"m\"\ntransform = \"misbehave\"\n\
             [sink]\ntopic = \"{run}-o.out\"\ncreate_topics = true\n"
        );
        first.ok("PUT", "/v1/pipelines/q", &other, toml_body(&other_spec));
        // A revocation through node 1 reaches node 2, whose follower does not wait either; a
        // tenant created through node 2 reaches node 1.
        assert_eq!(first.call("DELETE", "/v1/tenants/other/token", Some(ADMIN), None).0, 204);
        eventually(
            "node 2 refusing the revoked token",
            || second.call("GET", "/v1/pipelines", Some(&other), None).0 == 401,
            &logs,
        );
        let third = second.tenant("third", &format!("{run}-t."), None);
        eventually(
            "node 1 knowing the new tenant",
            || first.call("GET", "/v1/pipelines", Some(&third), None).0 == 200,
            &logs,
        );
        assert!(!stopped(&first) && !stopped(&second), "the guests' 30 s sleeps ended first:\n{}", logs());
        stop.join().expect("stop")
    });
    assert_eq!(stopping["desired"], "stopped", "{stopping}");
}

/// `/healthz` and `/readyz` take no token: ready with nothing deployed; 503 `failed` once a
/// pipeline failed for good (beside a healthy one), by counts only to anonymous callers and
/// tenants, naming the pipeline and its error to the admin; ready again once its tenant stops it.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_counts_a_failed_pipeline_names_it_only_to_the_admin_and_forgets_it_once_stopped() {
    let serve = Serve::start("max_identical_failures = 2");
    let health = serve.call("GET", "/healthz", None, None);
    assert_eq!(health, (200, Value::String("ok\n".into())));
    let (status, empty) = serve.call("GET", "/readyz", None, None);
    assert_eq!((status, &empty["ready"], &empty["total"]), (200, &json!(true), &json!(0)), "{empty}");

    let run = unique_name("weir-probed");
    let token = serve.tenant("probed", &format!("{run}."), None);
    for transform in ["misbehave", "passthrough"] {
        let bytes = std::fs::read(plugin(transform)).expect("plugin");
        assert_eq!(serve.upload(&token, transform, bytes).0, 201);
    }
    for (name, transform, input) in [("poison", "misbehave", "error"), ("healthy", "passthrough", "fine")] {
        let (source, sink) = (format!("{run}.{name}-in"), format!("{run}.{name}-out"));
        produce(&source, 1, &[(None, input.to_owned())]).await;
        let spec = format!(
            "[source]\ntopics = [\"{source}\"]\n[[transforms]]\nname = \"t\"\ntransform = \"{transform}\"\n\
             [sink]\ntopic = \"{sink}\"\ncreate_topics = true\n"
        );
        serve.ok("PUT", &format!("/v1/pipelines/{name}"), &token, toml_body(&spec));
    }
    let readyz = format!("{}/readyz", serve.base);
    let (_, failed) = poll_until(&readyz, "503: one failed, one ready", RUN_TIMEOUT, |status, body| {
        status == 503 && body["not_ready"] == json!({ "failed": 1 }) && body["total"] == 2
    });
    assert_eq!(failed["reason"], "failed");
    for (who, body) in
        [("anonymous", failed.clone()), ("the tenant", serve.call("GET", "/readyz", Some(&token), None).1)]
    {
        assert!(body.get("pipelines").is_none(), "{who} sees no pipelines: {body}");
        let text = body.to_string();
        assert!(!text.contains("poison") && !text.contains("probed"), "{who} learns no names: {text}");
    }
    let (status, admin) = serve.call("GET", "/readyz", Some(ADMIN), None);
    assert_eq!(status, 503);
    let listed = admin["pipelines"].as_array().expect("the admin sees the pipelines");
    let poison = listed.iter().find(|p| p["name"] == "probed.poison").unwrap_or_else(|| panic!("{admin}"));
    assert_eq!(poison["reason"], "failed");
    assert!(poison["detail"].as_str().is_some_and(|d| d.contains("misbehave: error at offset 0")), "{admin}");
    let healthy = listed.iter().find(|p| p["name"] == "probed.healthy").unwrap_or_else(|| panic!("{admin}"));
    assert_eq!((&healthy["ready"], &healthy["reason"]), (&json!(true), &Value::Null));

    serve.ok("POST", "/v1/pipelines/poison/stop", &token, None);
    let (_, ready) =
        poll_until(&readyz, "200 once the failed pipeline is stopped", RUN_TIMEOUT, |status, _| status == 200);
    assert_eq!((&ready["total"], &ready["not_ready"]), (&json!(1), &json!({})), "{ready}");
}

/// Issue 44: `/`, `/metrics` and `/api/pipelines` answer nobody without a token, show a tenant
/// its own pipelines, series and log lines only (tenant a's guest fails on a record and the
/// error quotes it: a secret-looking line in a's log), and every tenant's to the admin and to
/// the metrics token (`metrics_token`), which reads nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_and_metrics_show_each_tenant_its_own_pipelines_and_need_a_token() {
    const SECRET: &str = "SSN-078-05-1120";
    let scrape = "metrics-token-for-the-hosting-tests";
    let serve = Serve::on_cluster(
        "node-1",
        &unique_name("weir-registry"),
        &format!("brokers = \"{}\"\n", bootstrap()),
        "max_identical_failures = 2\nmetrics_token = \"${env:WEIR_TEST_METRICS_TOKEN}\"",
        vec![("WEIR_TEST_METRICS_TOKEN".to_owned(), scrape.to_owned())],
    );
    let run = unique_name("weir-scoped");
    let a = serve.tenant("a", &format!("{run}-a."), None);
    let b = serve.tenant("b", &format!("{run}-b."), None);
    // Both tenants name their pipeline `leaky`: a's guest fails on its record, quoting it.
    for (token, prefix, transform, input) in
        [(&a, "a", "misbehave", format!("store:{SECRET}")), (&b, "b", "passthrough", "fine".to_owned())]
    {
        let bytes = std::fs::read(plugin(transform)).expect("plugin");
        assert_eq!(serve.upload(token, transform, bytes).0, 201);
        let (source, sink) = (format!("{run}-{prefix}.in"), format!("{run}-{prefix}.out"));
        produce(&source, 1, &[(None, input)]).await;
        let spec = format!(
            "[source]\ntopics = [\"{source}\"]\n[[transforms]]\nname = \"t\"\ntransform = \"{transform}\"\n\
             [sink]\ntopic = \"{sink}\"\ncreate_topics = true\n"
        );
        serve.ok("PUT", "/v1/pipelines/leaky", token, toml_body(&spec));
    }
    wait_for_state(&serve, &a, "leaky", "failed");
    wait_for_state(&serve, &b, "leaky", "running");
    let text = |route: &str, token: Option<&str>| {
        let (status, answer) = serve.call("GET", route, token, None);
        assert_eq!(status, 200, "GET {route} with {token:?}: {answer}");
        answer.as_str().map_or_else(|| answer.to_string(), str::to_owned)
    };
    // Anonymous, a wrong token, a forged tenant token: 401, no data.
    let forged = format!("weir_a_{}", "A".repeat(43));
    for route in ["/", "/metrics", "/api/pipelines"] {
        for token in [None, Some("nonsense"), Some(forged.as_str())] {
            let (status, answer) = serve.call("GET", route, token, None);
            assert_eq!(status, 401, "GET {route} with {token:?}: {answer}");
            let shown = answer.to_string();
            assert!(!shown.contains(SECRET) && !shown.contains(&run), "GET {route} with {token:?} shows data: {shown}");
        }
    }
    let page = serve.call("GET", "/", None, None).1;
    assert!(page.as_str().is_some_and(|p| p.contains("sessionStorage")), "the page asks for a token: {page}");

    // The metrics' series of the caller's tenant(s): each series line's `tenant` label.
    let tenants_in = |metrics: &str| -> std::collections::BTreeSet<String> {
        let series = metrics.lines().filter(|l| !l.starts_with('#') && l.contains("pipeline=\""));
        series
            .map(|l| l.split("tenant=\"").nth(1).and_then(|t| t.split('"').next()).expect("a tenant label").to_owned())
            .collect()
    };
    let names = |view: &Value| -> Vec<String> {
        view["pipelines"]
            .as_array()
            .expect("pipelines")
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let dashboard =
        |token: &str| -> Value { serde_json::from_str(&text("/api/pipelines", Some(token))).expect("JSON") };

    for (who, token, other) in [("a", &a, "b"), ("b", &b, "a")] {
        let metrics = text("/metrics", Some(token));
        assert_eq!(tenants_in(&metrics), [who.to_owned()].into(), "{who}'s /metrics:\n{metrics}");
        assert!(!metrics.contains(&format!("{run}-{other}.")), "{who} sees {other}'s topics:\n{metrics}");
        assert!(!metrics.contains(&format!("tenant=\"{other}\"")), "{who} sees {other}'s series:\n{metrics}");
        let view = dashboard(token);
        assert_eq!(names(&view), [format!("{who}.leaky")], "{who}'s /api/pipelines: {view}");
        let shown = view.to_string();
        assert!(!shown.contains(&format!("{run}-{other}.")), "{who} sees {other}'s topics: {shown}");
        assert_eq!(shown.contains(SECRET), who == "a", "only a sees a's failing record: {shown}");
        let logs = serve.ok("GET", "/v1/pipelines/leaky/logs", token, None).to_string();
        assert_eq!(logs.contains(SECRET), who == "a", "{who}'s own `leaky` logs: {logs}");
        assert_eq!(text("/", Some(token)), page.as_str().unwrap(), "the page holds no data");
    }
    let a_view = dashboard(&a);
    assert!(a_view["log"].to_string().contains(SECRET), "a's log lines are its pipelines': {a_view}");

    // The admin and the metrics token see every tenant; the metrics token nothing else.
    for token in [ADMIN, scrape] {
        let metrics = text("/metrics", Some(token));
        assert_eq!(tenants_in(&metrics), ["a".to_owned(), "b".to_owned()].into(), "{metrics}");
        let mut seen = names(&dashboard(token));
        seen.sort();
        assert_eq!(seen, ["a.leaky", "b.leaky"]);
        assert!(dashboard(token).to_string().contains(SECRET));
    }
    for (method, path) in [("GET", "/v1/tenants"), ("GET", "/v1/pipelines"), ("POST", "/v1/tenants/a/token")] {
        let (status, answer) = serve.call(method, path, Some(scrape), None);
        assert_eq!(status, 403, "{method} {path} with the metrics token: {answer}");
    }
}

/// `weir serve` with its cluster in `[kafka]`, over SASL_SSL (SCRAM-SHA-512, the platform's
/// principal, its password a `${env:…}` reference): the registry, a tenant's upload and
/// flight-delays pipeline all work through it, the output is exact, and neither the API nor the
/// server's log shows the password.
#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_a_tenant_exactly_once_over_sasl_ssl() {
    const PARTITIONS: i32 = 2;
    let secured = weir_tests::secured::secured();
    let password = &secured.admin.1;
    let (cluster, env) = sasl_ssl_cluster(&secured.admin);
    let serve = Serve::on_cluster("node-1", &unique_name("weir-registry"), &cluster, "", env);
    let prefix = format!("{}.", unique_name("weir-sasl-host"));
    let token = serve.tenant("acme", &prefix, None);
    let (source, sink) = (format!("{prefix}flights"), format!("{prefix}delays"));
    let rows = flight_rows(2_000);
    produce(&source, PARTITIONS, &keyed(&rows)).await;
    let (status, uploaded) = serve.upload(&token, "flight-delays", std::fs::read(plugin("flight-delays")).unwrap());
    assert_eq!(status, 201, "{uploaded}");
    serve.ok("PUT", "/v1/pipelines/delays", &token, toml_body(&flight_delays_spec(&source, &sink, None)));
    let mut reader = Reader::new(&sink, PARTITIONS, Isolation::ReadCommitted);
    let read = reader.read_until(rows.len(), RUN_TIMEOUT);
    reader.drain(Duration::from_secs(2));
    assert_eq!(read, rows.len(), "{}", serve.log());
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
    let mut shown = serve.log();
    for route in ["/v1/pipelines/delays", "/v1/pipelines/delays/logs", "/v1/pipelines", "/api/pipelines", "/metrics"] {
        shown.push_str(&serve.call("GET", route, Some(&token), None).1.to_string());
        shown.push_str(&serve.call("GET", route, Some(ADMIN), None).1.to_string());
    }
    assert!(shown.contains("checkpoint committed"), "{shown}");
    assert!(!shown.contains(password.as_str()), "the password is shown:\n{shown}");
}

/// A `[kafka]` table of the test broker's SASL_SSL listener as SCRAM-SHA-512 user `(user,
/// password)`, the password a `${env:…}` reference, and the environment resolving it.
fn sasl_ssl_cluster((user, password): &(String, String)) -> (String, Vec<(String, String)>) {
    let secured = weir_tests::secured::secured();
    let cluster = format!(
        "[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"security.protocol\" = \"SASL_SSL\"\n\
         \"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"{user}\"\n\
         \"sasl.password\" = \"${{env:WEIR_TEST_SERVE_PASSWORD}}\"\n\"ssl.ca.location\" = \"{}\"\n",
        secured.sasl_ssl,
        secured.ca.display()
    );
    (cluster, vec![("WEIR_TEST_SERVE_PASSWORD".to_owned(), password.clone())])
}

/// The server process's resident set size and its peak so far, in KiB (`VmRSS`, `VmHWM` of
/// /proc/<pid>/status).
fn memory_kib(serve: &Serve) -> (u64, u64) {
    let pid = serve.child.as_ref().expect("running").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name}"));
        line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number")
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The `host:port` of a server's base URL.
fn address(serve: &Serve) -> String {
    serve.base.split("://").nth(1).expect("a URL").to_owned()
}

/// Reads from `stream` until the server closes it, `timeout` passes, or (with `head_only`) an
/// answer's head has come; returns what came and whether the server closed the connection (end
/// of stream, or a reset).
fn read_answer(stream: &mut std::net::TcpStream, timeout: Duration, head_only: bool) -> (String, bool) {
    use std::io::Read as _;
    let until = Instant::now() + timeout;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (String::from_utf8_lossy(&answer).into_owned(), false);
        }
        stream.set_read_timeout(Some(left)).expect("read timeout");
        match stream.read(&mut buffer) {
            Ok(0) => return (String::from_utf8_lossy(&answer).into_owned(), true),
            Ok(n) => {
                answer.extend_from_slice(&buffer[..n]);
                if head_only && answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    return (String::from_utf8_lossy(&answer).into_owned(), false);
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return (String::from_utf8_lossy(&answer).into_owned(), true),
        }
    }
}

/// Issue 44, item 6: an unauthenticated client sends 30 MiB bodies (twenty at once, and one that
/// stops half-way); each gets 401 at once, before its body is read, and the server's memory does
/// not grow by the bodies. Half-sent requests (headers never finished) are closed by the server
/// within its header timeout (10 s by default). 1500 stops of unknown 60 KiB pipeline names
/// leave nothing behind.
#[tokio::test(flavor = "multi_thread")]
async fn unauthenticated_bodies_half_sent_requests_and_unknown_names_take_no_memory() {
    use std::io::Write as _;
    const BODY: usize = 30 << 20;
    let serve = Serve::start("");
    let token = serve.tenant("acme", &format!("{}.", unique_name("weir-bounds")), None);
    let address = address(&serve);
    // 1500 stops of unknown 60 KiB names: no lock (nor anything else) kept for them. First, while
    // the allocator has no freed memory to reuse.
    let (rss_before, _) = memory_kib(&serve);
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    for i in 0..1500 {
        let name = format!("{i:05}{}", "x".repeat(60 << 10));
        let response = agent
            .post(format!("{}/v1/pipelines/{name}/stop", serve.base))
            .header("Authorization", &format!("Bearer {token}"))
            .send_empty()
            .expect("stop");
        assert!(matches!(response.status().as_u16(), 400 | 404), "stop of an unknown name: {}", response.status());
    }
    let (rss_after, _) = memory_kib(&serve);
    let grown = rss_after.saturating_sub(rss_before) >> 10;
    assert!(grown < 30, "the server's memory grew by {grown} MiB for 1500 stops of unknown names");
    let (_, peak_before) = memory_kib(&serve);
    let head = |path: &str, length: usize| {
        format!(
            "PUT {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/toml\r\nContent-Length: {length}\r\n\r\n"
        )
    };
    // Twenty bodies sent in full at once, no token: 401 for each, the bodies unread.
    let senders: Vec<_> = (0..20)
        .map(|i| {
            let mut stream = std::net::TcpStream::connect(&address).expect("connect");
            let mut writer = stream.try_clone().expect("clone");
            let head = head(&format!("/v1/pipelines/big-{i}"), BODY);
            let thread = std::thread::spawn(move || {
                let chunk = vec![b'#'; 1 << 20];
                let _ = writer.write_all(head.as_bytes());
                for _ in 0..BODY >> 20 {
                    if writer.write_all(&chunk).is_err() {
                        break;
                    }
                }
            });
            let started = Instant::now();
            let (answer, _) = read_answer(&mut stream, Duration::from_secs(20), true);
            (answer, started.elapsed(), thread)
        })
        .collect();
    for (answer, took, thread) in senders {
        assert!(answer.starts_with("HTTP/1.1 401"), "no 401 for a big unauthenticated body: {answer:?}");
        assert!(took < Duration::from_secs(5), "the 401 took {took:?}");
        thread.join().expect("sender");
    }
    // One body stopping half-way: the 401 does not wait for the rest.
    let mut stream = std::net::TcpStream::connect(&address).expect("connect");
    stream.write_all(head("/v1/pipelines/half", BODY).as_bytes()).expect("head");
    let _ = stream.write_all(&vec![b'#'; 1 << 20]);
    let (answer, _) = read_answer(&mut stream, Duration::from_secs(5), true);
    assert!(answer.starts_with("HTTP/1.1 401"), "no 401 within 5 s for a half-sent unauthenticated body: {answer:?}");
    let (_, peak_after) = memory_kib(&serve);
    let grown = peak_after.saturating_sub(peak_before) >> 10;
    assert!(grown < 50, "the server's peak memory grew by {grown} MiB for bodies it should not read");

    // Requests whose headers never end: closed by the server within its header timeout.
    let mut stalled: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&address).expect("connect");
            let head = format!("GET /v1/pipelines HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n");
            stream.write_all(head.as_bytes()).expect("half a head");
            stream
        })
        .collect();
    let started = Instant::now();
    for stream in &mut stalled {
        let (answer, closed) = read_answer(stream, Duration::from_secs(15).saturating_sub(started.elapsed()), false);
        assert!(closed, "a request with half its headers is still open after {:?}: {answer:?}", started.elapsed());
    }

    let (status, _) = serve.call("GET", "/healthz", None, None);
    assert_eq!(status, 200, "{}", serve.log());
}

/// Makes a CA and a server certificate it signs (SANs `127.0.0.1`, `localhost`) with `openssl`
/// in `dir`; returns the CA's, the certificate's and the key's PEM files.
fn make_certificates(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=weir-test-ca"],
        ]
        .concat(),
    );
    openssl(&[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("server.ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// Issue 44, item 8: the API serves TLS from a certificate and key in PEM files; the `weir`
/// client verifies the server against `--ca-cert` (or `$WEIR_CA_CERT`), refuses it without
/// (saying to pass `--ca-cert`), and plain HTTP to the TLS port gets an answer saying to use
/// https. `/healthz` and `/readyz` answer over TLS without a token, naming no tenant.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_serves_tls_the_client_verifies_with_its_ca_and_probes_need_no_token() {
    let certificates = tempfile::tempdir().expect("temporary directory");
    let (ca, cert, key) = make_certificates(certificates.path());
    let mut serve = Serve::start(&format!("tls_cert = \"{}\"\ntls_key = \"{}\"\n", cert.display(), key.display()));
    assert!(serve.base.starts_with("https://127.0.0.1:"), "{}", serve.base);
    serve.ca = Some(ca.clone());
    let token = serve.tenant("acme", &format!("{}.", unique_name("weir-tls")), None);
    let weir = |server: &str, args: &[&str], ca_env: Option<&PathBuf>| {
        let mut command = Command::new(weir_binary());
        command.args(["pipelines", "ls", "-o", "json", "--server", server]).args(args).env("WEIR_TOKEN", &token);
        command.env_remove("WEIR_CA_CERT").env_remove("WEIR_SERVER");
        if let Some(ca) = ca_env {
            command.env("WEIR_CA_CERT", ca);
        }
        let output = command.output().expect("run the weir client");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.success(), text)
    };
    let ca_text = ca.to_str().expect("a UTF-8 path");
    let (ok, text) = weir(&serve.base, &["--ca-cert", ca_text], None);
    assert!(ok && text.trim() == "[]", "with --ca-cert: {text}");
    let (ok, text) = weir(&serve.base, &[], Some(&ca));
    assert!(ok && text.trim() == "[]", "with WEIR_CA_CERT: {text}");
    let (ok, text) = weir(&serve.base, &[], None);
    assert!(!ok && text.contains("--ca-cert") && text.contains("certificate"), "without the CA: {text}");
    // Trusting another CA is no better.
    let other = tempfile::tempdir().expect("temporary directory");
    let (other_ca, _, _) = make_certificates(other.path());
    let (ok, text) = weir(&serve.base, &["--ca-cert", other_ca.to_str().expect("UTF-8")], None);
    assert!(!ok && text.contains("--ca-cert"), "with another CA: {text}");
    let plain = serve.base.replace("https://", "http://");
    let (ok, text) = weir(&plain, &[], None);
    assert!(!ok && text.contains("use https://"), "plain HTTP to the TLS port: {text}");

    // The probes: no token, over TLS, nothing about tenants.
    let (status, answer) = serve.call("GET", "/healthz", None, None);
    assert_eq!((status, answer), (200, Value::String("ok\n".into())));
    let (status, answer) = serve.call("GET", "/readyz", None, None);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ready"], true, "{answer}");
    assert!(answer.get("pipelines").is_none() && !answer.to_string().contains("acme"), "{answer}");
    // The API itself still needs the token over TLS.
    let (status, _) = serve.call("GET", "/v1/pipelines", None, None);
    assert_eq!(status, 401);
}

/// Issue 44, item 6: a request whose body stops half-way is answered (400) and closed once
/// `body_timeout_ms` has passed, on a spec route and on an upload; past `max_connections`, a
/// new connection is closed at once, and the server serves again once connections close.
#[tokio::test(flavor = "multi_thread")]
async fn half_sent_bodies_are_cut_at_the_body_timeout_and_connections_are_limited() {
    use std::io::Write as _;
    let serve = Serve::start("body_timeout_ms = 2000\nmax_connections = 8\n");
    let token = serve.tenant("acme", &format!("{}.", unique_name("weir-slow")), None);
    let address = address(&serve);
    for (path, content_type) in
        [("/v1/pipelines/slow", "application/toml"), ("/v1/transforms/slow", "application/wasm")]
    {
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: {content_type}\r\nContent-Length: 100000\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).expect("head");
        stream.write_all(&[b'#'; 1000]).expect("some of the body");
        let started = Instant::now();
        let (answer, closed) = read_answer(&mut stream, Duration::from_secs(10), false);
        let took = started.elapsed();
        assert!(closed && took < Duration::from_secs(6), "{path}: closed {closed} after {took:?}: {answer:?}");
        assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("body_timeout_ms"), "{path}: {answer:?}");
    }
    let idle: Vec<std::net::TcpStream> =
        (0..8).map(|_| std::net::TcpStream::connect(&address).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = std::net::TcpStream::connect(&address).expect("the kernel still accepts");
    let _ = extra.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes());
    let (answer, closed) = read_answer(&mut extra, Duration::from_secs(3), false);
    assert!(closed && answer.is_empty(), "a connection past max_connections was served: {answer:?}");
    drop(idle);
    std::thread::sleep(Duration::from_millis(500));
    eventually("the server serves again", || serve.call("GET", "/healthz", None, None).0 == 200, &|| serve.log());
    assert!(serve.log().contains("too many connections"), "{}", serve.log());
}

/// Issue 44, item 4: a `registry_topic` inside a prefix a tenant could be given handed that
/// tenant the registry (a `tenant/<victim>` record through its sink took over an account). Such
/// a tenant is refused at creation, and a registry already holding one keeps the server from
/// starting, both naming `registry_topic`.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_prefix_reaching_the_registry_topic_is_refused_at_creation_and_at_start() {
    let run = unique_name("weir-owned");
    let registry = format!("{run}.registry");
    let serve = Serve::node("node-1", &registry, "");
    for prefix in [format!("{run}."), format!("{run}_"), format!("{run}.registry")] {
        let request = json!({ "name": "evil", "topic_prefix": prefix }).to_string().into_bytes();
        let (status, answer) = serve.call("POST", "/v1/tenants", Some(ADMIN), Some(("application/json", request)));
        assert_eq!((status, answer["field"].as_str()), (400, Some("topic_prefix")), "{prefix}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("`registry_topic` {registry:?}")), "{message}");
    }
    assert_eq!(serve.ok("GET", "/v1/tenants", ADMIN, None), json!([]));
    // A prefix beside the registry topic is fine.
    serve.tenant("acme", &format!("{run}-acme."), None);
    drop(serve);

    // A tenant record written before this check (as an older server did) stops the start.
    let producer = weir_tests::admin::producer(&[]);
    let tenant = json!({ "name": "evil", "id": "0123456789ab", "topic_prefix": format!("{run}."), "quotas": {}, "token_sha256": null });
    let value = tenant.to_string();
    weir_tests::admin::send_waiting(
        &producer,
        BaseRecord::<str, str>::to(&registry).key("tenant/evil").payload(&value),
    );
    producer.flush(Duration::from_secs(30)).expect("flush the tenant record");
    let dir = tempfile::tempdir().expect("temporary directory");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nbrokers = \"{}\"\ndata_dir = \"data\"\nregistry_topic = \"{registry}\"\n",
        bootstrap()
    );
    std::fs::write(dir.path().join("serve.toml"), text).expect("serve.toml");
    let mut child = Command::new(weir_binary())
        .args(["serve", "--config", "serve.toml"])
        .current_dir(dir.path())
        .env("WEIR_ADMIN_TOKEN", ADMIN)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir serve");
    let exited = wait_exit(&mut child, RUN_TIMEOUT).expect("weir serve refuses to start");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    assert!(!exited.success(), "{stderr}");
    let wanted = format!("tenant evil: topic prefix \"{run}.\" overlaps the server's `registry_topic` {registry:?}");
    assert!(stderr.contains(&wanted), "{stderr}");
}

/// Makes the two calls at the same moment, each on a thread of its own; returns both answers.
fn at_once(
    first: impl FnOnce() -> (u16, Value) + Send,
    second: impl FnOnce() -> (u16, Value) + Send,
) -> [(u16, Value); 2] {
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        let barrier = &barrier;
        let first = scope.spawn(move || {
            barrier.wait();
            first()
        });
        let second = scope.spawn(move || {
            barrier.wait();
            second()
        });
        [first.join().expect("the first call"), second.join().expect("the second call")]
    })
}

/// `POST /v1/tenants` through node `a` and node `b` at the same moment, with `first` and
/// `second` as bodies; returns both answers.
fn create_at_once(a: &Serve, b: &Serve, first: Value, second: Value) -> [(u16, Value); 2] {
    let create = |node: &Serve, body: Value| {
        node.call("POST", "/v1/tenants", Some(ADMIN), Some(("application/json", body.to_string().into_bytes())))
    };
    at_once(|| create(a, first), || create(b, second))
}

/// Issue 44, item 1: two nodes asked at the same moment for two tenants on one prefix, or for
/// one tenant name, each answered 201 (each checked its own copy of the registry). The registry
/// topic now decides: exactly one 201 per race, both nodes then list the same winner, and the
/// winner's token works on both.
#[tokio::test(flavor = "multi_thread")]
async fn two_nodes_racing_for_one_prefix_or_one_name_create_one_tenant() {
    const ROUNDS: usize = 10;
    let first = Serve::start("");
    let second = first.another_node("node-2");
    let logs = || format!("node-1:\n{}\nnode-2:\n{}", first.log(), second.log());
    let run = unique_name("weir-race");
    let listed = |node: &Serve| node.ok("GET", "/v1/tenants", ADMIN, None);
    let mut tokens = Vec::new();
    for round in 0..ROUNDS {
        // One prefix, two names.
        let prefix = format!("{run}-{round}.");
        let answers = create_at_once(
            &first,
            &second,
            json!({ "name": format!("p{round}-a"), "topic_prefix": prefix }),
            json!({ "name": format!("p{round}-b"), "topic_prefix": prefix }),
        );
        let created: Vec<usize> = (0..2).filter(|&i| answers[i].0 == 201).collect();
        assert_eq!(created.len(), 1, "round {round}, one prefix: {answers:?}\n{}", logs());
        let loser = &answers[1 - created[0]];
        assert_eq!((loser.0, loser.1["field"].as_str()), (400, Some("topic_prefix")), "{answers:?}");
        // One name, two prefixes.
        let name = format!("n{round}");
        let answers = create_at_once(
            &first,
            &second,
            json!({ "name": name, "topic_prefix": format!("{run}-{round}-a.") }),
            json!({ "name": name, "topic_prefix": format!("{run}-{round}-b.") }),
        );
        let created: Vec<usize> = (0..2).filter(|&i| answers[i].0 == 201).collect();
        assert_eq!(created.len(), 1, "round {round}, one name: {answers:?}\n{}", logs());
        assert_eq!(answers[1 - created[0]].0, 409, "{answers:?}");
        let token = answers[created[0]].1["token"].as_str().expect("a token").to_owned();
        for node in [&first, &second] {
            eventually(
                "the winner's token working",
                || node.call("GET", "/v1/pipelines", Some(&token), None).0 == 200,
                &logs,
            );
        }
        tokens.push(token);
    }
    eventually("both nodes listing the same tenants", || listed(&first) == listed(&second), &logs);
    let tenants = listed(&first);
    assert_eq!(tenants.as_array().map(Vec::len), Some(2 * ROUNDS), "{tenants}");
    // The winners' tokens still work a moment later (the losers' records did not replace them).
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(listed(&first), listed(&second));
    for (token, node) in tokens.iter().flat_map(|token| [(token, &first), (token, &second)]) {
        assert_eq!(node.call("GET", "/v1/pipelines", Some(token), None).0, 200, "{}", logs());
    }
}

/// A spec naming uploaded transform `transform`, reading `source` and writing `sink`.
fn spec_using(transform: &str, source: &str, sink: &str) -> String {
    format!(
        "[source]\ntopics = [\"{source}\"]\n\n[[transforms]]\nname = \"p\"\ntransform = \"{transform}\"\n\n\
         [sink]\ntopic = \"{sink}\"\ncreate_topics = true\n"
    )
}

/// Asserts that exactly one of two racing calls succeeded; returns whether it was the first.
fn one_winner(race: &str, answers: &[(u16, Value); 2], logs: &dyn Fn() -> String) -> bool {
    let won: Vec<bool> = answers.iter().map(|(status, _)| (200..300).contains(status)).collect();
    assert!(won[0] != won[1], "{race}: {answers:?}\n{}", logs());
    let loser = &answers[usize::from(won[0])];
    assert!([400, 404, 409].contains(&loser.0), "{race}, the loser: {answers:?}");
    won[0]
}

/// Issue 44, item 1: two nodes asked at the same moment to delete a transform (or its tenant)
/// and to deploy a pipeline using it both said yes, each checking its own copy of the
/// registry, and left a pipeline whose transform was gone; two uploads of one transform both
/// became version 1, with different bytes; a token rotated as its tenant was deleted brought
/// the deleted tenant back. The registry topic's order now decides
/// (`server/admit.rs`): in every round exactly one of the racing calls succeeds, the loser is
/// told so, and both nodes end with the winner's registry.
#[tokio::test(flavor = "multi_thread")]
async fn two_nodes_racing_a_deletion_against_a_deploy_or_two_uploads_agree_on_one_winner() {
    const ROUNDS: usize = 5;
    let first = Serve::start("");
    let second = first.another_node("node-2");
    let logs = || format!("node-1:\n{}\nnode-2:\n{}", first.log(), second.log());
    let run = unique_name("weir-racing");
    let (source, sink) = (format!("{run}.in"), format!("{run}.out"));
    let token = first.tenant("acme", &format!("{run}."), None);
    weir_tests::create_topic(&source, 1).await;
    let passthrough = std::fs::read(plugin("passthrough")).expect("passthrough.wasm");
    let dedup = std::fs::read(plugin("dedup")).expect("dedup.wasm");
    let seen_by = |node: &Serve, token: &str, path: &str| {
        eventually(
            &format!("{path} reaching the other node"),
            || node.call("GET", path, Some(token), None).0 == 200,
            &logs,
        )
    };
    let listed = |node: &Serve, token: &str, path: &str| node.call("GET", path, Some(token), None);

    for round in 0..ROUNDS {
        // Node 1 deletes a transform as node 2 deploys a pipeline using it.
        let transform = format!("t{round}");
        assert_eq!(first.upload(&token, &transform, passthrough.clone()).0, 201, "{}", logs());
        seen_by(&second, &token, &format!("/v1/transforms/{transform}"));
        let spec = spec_using(&transform, &source, &sink);
        let answers = at_once(
            || first.call("DELETE", &format!("/v1/transforms/{transform}"), Some(&token), None),
            || second.call("PUT", &format!("/v1/pipelines/p{round}"), Some(&token), toml_body(&spec)),
        );
        let deleted = one_winner("transform deletion against a deploy", &answers, &logs);
        eventually(
            "both nodes agreeing on the transforms and pipelines",
            || {
                ["/v1/transforms", "/v1/pipelines"]
                    .iter()
                    .all(|path| names(&listed(&first, &token, path).1) == names(&listed(&second, &token, path).1))
            },
            &logs,
        );
        let transforms = names(&listed(&first, &token, "/v1/transforms").1);
        let pipelines = names(&listed(&second, &token, "/v1/pipelines").1);
        assert_eq!(transforms.contains(&transform), !deleted, "round {round}: {transforms:?} {answers:?}");
        assert_eq!(pipelines.contains(&format!("p{round}")), !deleted, "round {round}: {pipelines:?} {answers:?}");
        if !deleted {
            first.ok("DELETE", &format!("/v1/pipelines/p{round}"), &token, None);
        }

        // The admin deletes a tenant through node 1 as its pipeline is deployed through node 2.
        let tenant = format!("r{round}");
        let other = first.tenant(&tenant, &format!("{run}-{round}."), None);
        seen_by(&second, &other, "/v1/transforms");
        assert_eq!(first.upload(&other, "t", passthrough.clone()).0, 201, "{}", logs());
        seen_by(&second, &other, "/v1/transforms/t");
        let spec = spec_using("t", &format!("{run}-{round}.in"), &format!("{run}-{round}.out"));
        let answers = at_once(
            || first.call("DELETE", &format!("/v1/tenants/{tenant}"), Some(ADMIN), None),
            || second.call("PUT", "/v1/pipelines/p", Some(&other), toml_body(&spec)),
        );
        let deleted = one_winner("tenant deletion against a deploy", &answers, &logs);
        eventually(
            "both nodes agreeing on the tenants",
            || listed(&first, ADMIN, "/v1/tenants") == listed(&second, ADMIN, "/v1/tenants"),
            &logs,
        );
        let tenants = names(&listed(&second, ADMIN, "/v1/tenants").1);
        assert_eq!(tenants.contains(&tenant), !deleted, "round {round}: {tenants:?} {answers:?}");
        if !deleted {
            let pipelines = names(&listed(&first, &other, "/v1/pipelines").1);
            assert_eq!(pipelines, ["p"], "round {round}: {answers:?}\n{}", logs());
            first.ok("DELETE", "/v1/pipelines/p", &other, None);
        }

        // The admin deletes a tenant through node 1 as its token is rotated through node 2:
        // the deletion answered 204, and the rotation brought the tenant back on every node.
        let tenant = format!("k{round}");
        first.tenant(&tenant, &format!("{run}-k{round}."), None);
        let has = |node: &Serve| names(&listed(node, ADMIN, "/v1/tenants").1).contains(&tenant);
        eventually("the tenant reaching node 2", || has(&second), &logs);
        let answers = at_once(
            || first.call("DELETE", &format!("/v1/tenants/{tenant}"), Some(ADMIN), None),
            || second.call("POST", &format!("/v1/tenants/{tenant}/token"), Some(ADMIN), None),
        );
        let deleted = answers[0].0 == 204;
        assert!(deleted || answers[1].0 == 200, "round {round}: {answers:?}\n{}", logs());
        eventually(
            "both nodes agreeing on the tenants",
            || listed(&first, ADMIN, "/v1/tenants") == listed(&second, ADMIN, "/v1/tenants"),
            &logs,
        );
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(has(&first), !deleted, "round {round}: {answers:?}\n{}", logs());
        assert_eq!(has(&second), !deleted, "round {round}: {answers:?}\n{}", logs());

        // Two uploads of one transform, with different bytes, one through each node.
        let transform = format!("u{round}");
        let path = format!("/v1/transforms/{transform}");
        let answers = at_once(
            || first.upload(&token, &transform, passthrough.clone()),
            || second.upload(&token, &transform, dedup.clone()),
        );
        let uploaded: Vec<&Value> = answers.iter().filter(|(status, _)| *status == 201).map(|(_, a)| a).collect();
        assert!(!uploaded.is_empty(), "round {round}: {answers:?}\n{}", logs());
        for (status, answer) in &answers {
            assert!(*status == 201 || *status == 409, "round {round}: {status} {answer}");
        }
        eventually(
            "both nodes agreeing on the versions",
            || listed(&first, &token, &path) == listed(&second, &token, &path),
            &logs,
        );
        let versions = listed(&first, &token, &path).1["versions"].clone();
        for answer in uploaded {
            let kept = versions
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["version"] == answer["version"] && v["sha256"] == answer["sha256"]);
            assert!(kept, "round {round}: the upload {answer} answered 201 but is not in {versions}\n{}", logs());
        }
    }
}

/// The `name` of each object of a JSON list.
fn names(list: &Value) -> Vec<String> {
    list.as_array().into_iter().flatten().filter_map(|o| o["name"].as_str().map(str::to_owned)).collect()
}

/// The `[tenant_principals]` secret of these tests (from the environment, as an operator gives it).
const PRINCIPALS_SECRET: &str = "tenant-principals-secret-of-the-hosting-tests";

/// `weir serve` on the SASL_SSL listener as the super user, each tenant's pipelines connecting
/// as the tenant's own SCRAM user (`[tenant_principals]`).
fn serve_with_tenant_principals() -> Serve {
    let (cluster, mut env) = sasl_ssl_cluster(&weir_tests::secured::secured().admin);
    env.push(("WEIR_TEST_PRINCIPALS_SECRET".to_owned(), PRINCIPALS_SECRET.to_owned()));
    let extra = "[tenant_principals]\nmechanism = \"SCRAM-SHA-512\"\nsecret = \"${env:WEIR_TEST_PRINCIPALS_SECRET}\"\n";
    Serve::on_cluster("node-1", &unique_name("weir-registry"), &cluster, extra, env)
}

/// The principal the broker allows `operation`s on topics under `prefix` (a `PREFIXED` ACL),
/// from Kafka's own `kafka-acls --list`; `None` when there is none.
fn principal_on(prefix: &str) -> Option<String> {
    let listing = weir_tests::secured::acl(&["--list", "--topic", prefix, "--resource-pattern-type", "prefixed"]);
    let principal = listing.split("principal=").nth(1)?.split(',').next()?;
    Some(principal.trim().to_owned())
}

/// The ACLs of `principal` as `kafka-acls --list --principal` shows them.
fn acls_of(principal: &str) -> String {
    weir_tests::secured::acl(&["--list", "--principal", principal])
}

/// The SCRAM credentials of `user` as Kafka's `kafka-configs --describe` shows them.
fn scram_of(user: &str) -> String {
    weir_tests::broker::kafka_sh(&[
        "run",
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        &bootstrap(),
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        user,
    ])
}

/// The password `weir serve` derives for tenant principal `user` from [`PRINCIPALS_SECRET`].
fn tenant_password(user: &str) -> String {
    let principals =
        weir::TenantPrincipals { mechanism: weir::ScramMechanism::Sha512, secret: PRINCIPALS_SECRET.to_owned() };
    principals.password(user)
}

/// Runs `weir run` on a pipeline file connecting to the SASL_SSL listener as `user` (with the
/// password [`PRINCIPALS_SECRET`] derives for it), reading `source` as consumer group `group`
/// and writing `sink` with transactional ids under `transactional`; returns whether it succeeded
/// and its log. It is what a hosted spec that slipped past Weir's checks would run as.
fn run_as_tenant(user: &str, source: &str, group: &str, transactional: &str, sink: &str) -> (bool, String) {
    let secured = weir_tests::secured::secured();
    let dir = tempfile::tempdir().expect("temporary directory");
    let text = format!(
        "name = \"crossing\"\n[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"security.protocol\" = \"SASL_SSL\"\n\
         \"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"{user}\"\n\
         \"sasl.password\" = \"${{env:WEIR_TEST_TENANT_PASSWORD}}\"\n\"ssl.ca.location\" = \"{}\"\n\n\
         [source]\ntopics = [\"{source}\"]\ngroup_id = \"{group}\"\n\n\
         [[transforms]]\nname = \"flight-delays\"\nwasm = \"{}\"\n\n\
         [sink]\ntopic = \"{sink}\"\ntransactional_id_prefix = \"{transactional}\"\ncreate_topics = true\n\n\
         [state]\ndir = \"state\"\nchangelog_topic = \"{sink}-changelog\"\n",
        secured.sasl_ssl,
        secured.ca.display(),
        plugin("flight-delays").display()
    );
    std::fs::write(dir.path().join("pipeline.toml"), text).expect("pipeline file");
    let log = dir.path().join("weir.log");
    let mut child = Command::new(weir_binary())
        .args(["run", "pipeline.toml"])
        .current_dir(dir.path())
        .env("WEIR_TEST_TENANT_PASSWORD", tenant_password(user))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start weir run");
    let status = wait_exit(&mut child, RUN_TIMEOUT).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("weir run as {user} did not stop: {}", std::fs::read_to_string(&log).unwrap_or_default())
    });
    (status.success(), std::fs::read_to_string(&log).unwrap_or_default())
}

/// Kafka's authorizer as the second wall (issue 44, item 5). With `[tenant_principals]`, each
/// tenant gets a SCRAM user holding only PREFIXED ACLs on its topic prefix and on its groups'
/// and transactional ids' prefix; its pipeline runs exactly once as that user. Run as that user,
/// a pipeline reading another tenant's topic, or using its consumer group or its transactional
/// ids, is refused by the broker. An ACL taken away by hand makes the hosted pipeline's status name the refusal, the
/// principal and what to do; a restart writes the ACLs again and the output ends exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn each_tenant_runs_as_its_own_principal_and_the_broker_refuses_it_other_tenants_names() {
    const PARTITIONS: i32 = 2;
    let mut serve = serve_with_tenant_principals();
    let run = unique_name("weir-principals");
    let (acme, rival) = (format!("{run}-acme."), format!("{run}-rival."));
    let token = serve.tenant("acme", &acme, None);
    serve.tenant("rival", &rival, None);
    let principal = principal_on(&acme).unwrap_or_else(|| panic!("no ACL on {acme}: {}", serve.log()));
    let user = principal.strip_prefix("User:").expect("a user").to_owned();
    assert!(user.starts_with("weir-acme-"), "{user}");
    let rival_principal = principal_on(&rival).expect("rival's ACLs");
    let rival_user = rival_principal.strip_prefix("User:").expect("a user").to_owned();
    assert_ne!(principal, rival_principal);
    let listing = acls_of(&principal);
    assert_eq!(listing.matches("operation=").count(), 9, "{listing}");
    assert_eq!(listing.matches("patternType=PREFIXED").count(), 3, "{listing}");
    for resource in
        [format!("TOPIC, name={acme},"), format!("GROUP, name={user}.,"), format!("TRANSACTIONAL_ID, name={user}.,")]
    {
        assert!(listing.contains(&format!("resourceType={resource}")), "{resource}: {listing}");
    }
    assert!(!listing.contains(&rival) && !listing.contains("LITERAL") && !listing.contains("CLUSTER"), "{listing}");
    assert!(scram_of(&user).contains("SCRAM-SHA-512=iterations"), "{}", scram_of(&user));

    // The tenant's pipeline runs exactly once, as its principal.
    let (source, sink) = (format!("{acme}flights"), format!("{acme}delays"));
    let rows = flight_rows(3_000);
    let (first, second) = rows.split_at(1_500);
    produce(&source, PARTITIONS, &keyed(first)).await;
    let (status, uploaded) = serve.upload(&token, "flight-delays", std::fs::read(plugin("flight-delays")).unwrap());
    assert_eq!(status, 201, "{uploaded}");
    serve.ok("PUT", "/v1/pipelines/delays", &token, toml_body(&flight_delays_spec(&source, &sink, None)));
    let mut reader = Reader::new(&sink, PARTITIONS, Isolation::ReadCommitted);
    assert_eq!(reader.read_until(first.len(), RUN_TIMEOUT), first.len(), "{}", serve.log());

    // The second wall: a spec that slipped past Weir's checks, run as the tenant's principal.
    let secret_topic = format!("{rival}flights");
    produce(&secret_topic, 1, &keyed(&flight_rows(10))).await;
    let own = format!("{user}.crossing");
    let theirs = format!("{rival_user}.delays");
    let attempts = [
        (secret_topic.as_str(), &own, &own, "Topic authorization failed", &secret_topic),
        (source.as_str(), &theirs, &own, "Group authorization failed", &theirs),
        (source.as_str(), &own, &theirs, "Transactional Id authorization failed", &theirs),
    ];
    for (from, group, transactional, refusal, resource) in attempts {
        let (ok, log) = run_as_tenant(&user, from, group, transactional, &format!("{acme}stolen"));
        assert!(!ok, "reading {from} as group {group} worked: {log}");
        let line = log.lines().find(|l| l.contains("the cluster refuses")).unwrap_or_else(|| panic!("{log}"));
        assert!(line.contains(refusal) && line.contains(resource.as_str()), "{refusal} on {resource}: {line}");
        assert!(line.contains("grant the pipeline's principal"), "{line}");
    }

    // A right taken away by hand: the broker refuses the running pipeline, and its status says
    // which principal it runs as and what it may use.
    let write = [
        "--allow-principal",
        &principal,
        "--operation",
        "Write",
        "--topic",
        &acme,
        "--resource-pattern-type",
        "prefixed",
    ];
    weir_tests::secured::acl(&[&["--remove"][..], &write[..]].concat());
    produce(&source, PARTITIONS, &keyed(second)).await;
    let mut last_error = String::new();
    eventually(
        "the refusal in the pipeline's status",
        || {
            let status = serve.ok("GET", "/v1/pipelines/delays", &token, None);
            last_error = status["last_error"].as_str().unwrap_or_default().to_owned();
            last_error.contains("authorization failed")
        },
        &|| serve.log(),
    );
    assert!(last_error.contains(&format!("as Kafka principal {principal}")), "{last_error}");
    assert!(last_error.contains(&acme) && last_error.contains("name only topics of your prefix"), "{last_error}");

    // A restart writes every tenant's ACLs again: the pipeline resumes, exactly once.
    serve.kill();
    serve.spawn();
    assert!(acls_of(&principal).contains("operation=WRITE"), "{}", acls_of(&principal));
    let read = reader.read_until(rows.len(), RUN_TIMEOUT);
    reader.drain(Duration::from_secs(2));
    assert_eq!(read, rows.len(), "{}", serve.log());
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
    assert!(!serve.log().contains(&tenant_password(&user)));
}

/// Deleting a tenant deletes its principal: its ACLs and its SCRAM credential. And a server
/// whose cluster authenticates no one refuses `[tenant_principals]` at start.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_tenant_leaves_no_principal_and_a_plaintext_cluster_refuses_tenant_principals() {
    let serve = serve_with_tenant_principals();
    let prefix = format!("{}.", unique_name("weir-retired"));
    serve.tenant("gone", &prefix, None);
    let principal = principal_on(&prefix).unwrap_or_else(|| panic!("no ACL on {prefix}: {}", serve.log()));
    let user = principal.strip_prefix("User:").expect("a user").to_owned();
    assert!(scram_of(&user).contains("SCRAM-SHA-512=iterations"), "{}", scram_of(&user));
    serve.ok("DELETE", "/v1/tenants/gone", ADMIN, None);
    eventually("the ACLs' deletion", || !acls_of(&principal).contains("operation="), &|| acls_of(&principal));
    eventually("the credential's deletion", || !scram_of(&user).contains("SCRAM-SHA-512"), &|| scram_of(&user));

    let dir = tempfile::tempdir().expect("temporary directory");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nbrokers = \"{}\"\ndata_dir = \"data\"\n\
         [tenant_principals]\nsecret = \"${{env:WEIR_TEST_PRINCIPALS_SECRET}}\"\n",
        bootstrap()
    );
    std::fs::write(dir.path().join("serve.toml"), text).expect("serve.toml");
    let output = Command::new(weir_binary())
        .args(["serve", "--config", "serve.toml"])
        .current_dir(dir.path())
        .env("WEIR_ADMIN_TOKEN", ADMIN)
        .env("WEIR_TEST_PRINCIPALS_SECRET", PRINCIPALS_SECRET)
        .output()
        .expect("weir serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("`tenant_principals`") && stderr.contains("SASL_SSL"), "{stderr}");
}

/// The topics (or, with `groups`, the consumer groups) the broker lists whose names start with
/// `prefix`, sorted.
fn on_broker(prefix: &str, groups: bool) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let client: BaseConsumer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("a client");
    let timeout = Duration::from_secs(10);
    let mut names: Vec<String> = if groups {
        let list = client.fetch_group_list(None, timeout).expect("the group list");
        list.groups().iter().map(|g| g.name().to_owned()).collect()
    } else {
        let metadata = client.fetch_metadata(None, timeout).expect("the metadata");
        metadata.topics().iter().filter(|t| t.error().is_none()).map(|t| t.name().to_owned()).collect()
    };
    names.retain(|name| name.starts_with(prefix));
    names.sort();
    names
}

/// A passthrough spec from `source` to `sink`, with dead letters to `dlq`; its members leave
/// the group 6 s after they stop (a deletion waits for that).
fn passthrough_spec(source: &str, sink: &str, dlq: &str) -> String {
    format!(
        "[source]\ntopics = [\"{source}\"]\n[source.consumer]\n\"session.timeout.ms\" = 6000\n\
         [[transforms]]\nname = \"t\"\ntransform = \"passthrough\"\non_error = \"dead-letter\"\n\
         [sink]\ntopic = \"{sink}\"\ndead_letter_topic = \"{dlq}\"\ncreate_topics = true\n\
         [checkpoint]\ninterval_ms = 100\n"
    )
}

/// Whether `metrics` (Prometheus text) holds a series of tenant `tenant`.
fn has_series_of(metrics: &str, tenant: &str) -> bool {
    metrics.lines().any(|l| !l.starts_with('#') && l.contains(&format!("tenant=\"{tenant}\"")))
}

/// Deleting a tenant deletes every topic under its prefix (source, sink, dead letters,
/// changelog), its consumer groups and its metrics' series; the same name and prefix given to a
/// new tenant then start empty: its pipeline reads none of the old records, and its figures
/// start from zero. A prefix with topics under it is refused for a new tenant (issue 44).
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_tenant_leaves_nothing_and_a_new_one_on_its_prefix_reads_nothing_of_it() {
    let serve = Serve::start("");
    let run = unique_name("weir-purge");
    // Tenant names are unique in the broker's group ids only with a unique name.
    let name = unique_name("t");
    let prefix = format!("{run}.");
    let orphan = format!("{run}-orphan.left");
    weir_tests::create_topic(&orphan, 1).await;
    let request = json!({ "name": "orphan", "topic_prefix": format!("{run}-orphan.") }).to_string().into_bytes();
    let (status, answer) = serve.call("POST", "/v1/tenants", Some(ADMIN), Some(("application/json", request)));
    assert_eq!((status, answer["field"].as_str()), (400, Some("topic_prefix")), "{answer}");
    assert!(answer["message"].as_str().is_some_and(|m| m.contains(&orphan)), "names the topic: {answer}");

    let (source, sink, dlq) = (format!("{prefix}in"), format!("{prefix}out"), format!("{prefix}dlq"));
    let spec = passthrough_spec(&source, &sink, &dlq);
    let bytes = std::fs::read(plugin("passthrough")).expect("passthrough.wasm");
    let deploy = |token: &str| {
        assert_eq!(serve.upload(token, "passthrough", bytes.clone()).0, 201);
        serve.ok("PUT", "/v1/pipelines/p", token, toml_body(&spec));
    };
    let token = serve.tenant(&name, &prefix, None);
    let old: Vec<(Option<String>, String)> = (0..5).map(|i| (None, format!("old-{i}"))).collect();
    produce(&source, 1, &old).await;
    deploy(&token);
    let mut reader = Reader::new(&sink, 1, Isolation::ReadCommitted);
    assert_eq!(reader.read_until(old.len(), RUN_TIMEOUT), old.len(), "{}", serve.log());
    let topics = on_broker(&prefix, false);
    assert!(topics.iter().any(|t| t.ends_with("-changelog")), "a changelog: {topics:?}");
    assert!([&source, &sink, &dlq].iter().all(|t| topics.contains(t)), "{topics:?}");
    let groups = format!("weir-{name}-");
    assert_eq!(on_broker(&groups, true).len(), 1, "the pipeline's group");
    let metrics = serve.ok("GET", "/metrics", ADMIN, None);
    assert!(has_series_of(metrics.as_str().expect("text"), &name), "{metrics}");

    serve.ok("DELETE", "/v1/pipelines/p", &token, None);
    serve.ok("DELETE", &format!("/v1/tenants/{name}"), ADMIN, None);
    assert_eq!(on_broker(&prefix, false), Vec::<String>::new(), "topics left under the prefix");
    assert_eq!(on_broker(&groups, true), Vec::<String>::new(), "groups left of the tenant");
    let metrics = serve.ok("GET", "/metrics", ADMIN, None);
    let metrics = metrics.as_str().expect("text");
    assert!(!has_series_of(metrics, &name), "series left of the tenant:\n{metrics}");
    assert!(!metrics.contains(&prefix), "series left naming its topics:\n{metrics}");

    // The same name and prefix again: nothing of the old tenant comes back.
    let token = serve.tenant(&name, &prefix, None);
    weir_tests::create_topic(&source, 1).await;
    deploy(&token);
    wait_for_state(&serve, &token, "p", "running");
    produce(&source, 1, &[(None, "new".to_owned())]).await;
    let mut reader = Reader::new(&sink, 1, Isolation::ReadCommitted);
    reader.read_until(1, RUN_TIMEOUT);
    reader.drain(Duration::from_secs(3));
    let values: Vec<String> = reader.records.iter().map(|r| r.value.clone().unwrap_or_default()).collect();
    assert_eq!(values, ["new"], "the new tenant's output\n{}", serve.log());
    let status = serve.ok("GET", "/v1/pipelines/p", &token, None);
    assert_eq!(status["metrics"]["records_in"], 1, "figures from zero: {status}");
}

/// With `on_tenant_delete = "retire"`, a deleted tenant's topics stay, and its prefix, and every
/// prefix overlapping it, is refused for new tenants, also once its topics are gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_retired_prefix_is_never_given_again() {
    let serve = Serve::start("on_tenant_delete = \"retire\"");
    let run = unique_name("weir-retire");
    let source = format!("{run}.in");
    serve.tenant("acme", &format!("{run}."), None);
    produce(&source, 1, &[(None, "kept".to_owned())]).await;
    serve.ok("DELETE", "/v1/tenants/acme", ADMIN, None);
    assert_eq!(weir_tests::admin::listed_partitions(&source), Some(1), "the topic is kept");
    let refused = |prefix: String, words: &str| {
        let request = json!({ "name": "acme", "topic_prefix": prefix }).to_string().into_bytes();
        let (status, answer) = serve.call("POST", "/v1/tenants", Some(ADMIN), Some(("application/json", request)));
        assert_eq!((status, answer["field"].as_str()), (400, Some("topic_prefix")), "{prefix}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{prefix}: {message}");
    };
    refused(format!("{run}."), "retired for good");
    refused(format!("{run}.sub."), "retired for good");
    weir_tests::admin::delete_topic(&source).await;
    refused(format!("{run}."), "retired for good");
    refused(format!("{run}_"), "retired for good");
    refused(run.clone(), "retired for good");
    serve.tenant("acme", &format!("{run}-other."), None);
}

/// A pipeline deleted and deployed again under its name starts from scratch: it reads its
/// source from the start again and its state (dedup's keys seen) is empty; the deleted one's
/// changelog and series are gone (issue 44).
#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_deployed_again_after_its_deletion_starts_from_scratch() {
    let serve = Serve::start("");
    let run = unique_name("weir-again");
    let prefix = format!("{run}.");
    let token = serve.tenant("acme", &prefix, None);
    let bytes = std::fs::read(plugin("dedup")).expect("dedup.wasm");
    assert_eq!(serve.upload(&token, "dedup", bytes).0, 201);
    let (source, sink) = (format!("{prefix}in"), format!("{prefix}out"));
    let rows: Vec<(Option<String>, String)> = (0..10).map(|i| (Some(format!("k{i}")), format!("v{i}"))).collect();
    produce(&source, 1, &rows).await;
    let spec = format!(
        "[source]\ntopics = [\"{source}\"]\n[[transforms]]\nname = \"d\"\ntransform = \"dedup\"\n\
         config = {{ window_records = \"1000000\" }}\n[sink]\ntopic = \"{sink}\"\ncreate_topics = true\n\
         [checkpoint]\ninterval_ms = 100\n"
    );
    serve.ok("PUT", "/v1/pipelines/d", &token, toml_body(&spec));
    let mut reader = Reader::new(&sink, 1, Isolation::ReadCommitted);
    assert_eq!(reader.read_until(rows.len(), RUN_TIMEOUT), rows.len(), "{}", serve.log());
    let changelogs = || on_broker(&prefix, false).into_iter().filter(|t| t.ends_with("-changelog")).collect::<Vec<_>>();
    let first = changelogs();
    assert_eq!(first.len(), 1, "{first:?}");

    serve.ok("DELETE", "/v1/pipelines/d", &token, None);
    let metrics = serve.ok("GET", "/metrics", ADMIN, None);
    assert!(!metrics.as_str().expect("text").contains("pipeline=\"acme.d\""), "series left: {metrics}");
    eventually("the changelog deleted", || changelogs().is_empty(), &|| serve.log());
    serve.ok("PUT", "/v1/pipelines/d", &token, toml_body(&spec));
    assert_eq!(reader.read_until(2 * rows.len(), RUN_TIMEOUT), 2 * rows.len(), "read again\n{}", serve.log());
    let second = changelogs();
    assert!(second.len() == 1 && second != first, "a changelog of its own: {first:?} {second:?}");
    let status = serve.ok("GET", "/v1/pipelines/d", &token, None);
    assert_eq!(status["metrics"]["records_in"], rows.len(), "figures from zero: {status}");
}

/// Two nodes asked at the same moment to deploy one new pipeline each give it an id of its own:
/// the registry topic's order decides which incarnation runs. One `201`; the other node answers
/// `409` (or `200` when it had read the first deploy already and took its own as a redeploy),
/// and the source is read once (issue 44).
#[tokio::test(flavor = "multi_thread")]
async fn two_nodes_deploying_one_new_pipeline_at_once_run_one_incarnation() {
    const ROUNDS: usize = 3;
    let first = Serve::start("");
    let second = first.another_node("node-2");
    let logs = || format!("node-1:\n{}\nnode-2:\n{}", first.log(), second.log());
    let run = unique_name("weir-deploys");
    let token = first.tenant("acme", &format!("{run}."), None);
    let bytes = std::fs::read(plugin("passthrough")).expect("passthrough.wasm");
    assert_eq!(first.upload(&token, "passthrough", bytes).0, 201);
    eventually(
        "the transform reaching node 2",
        || second.call("GET", "/v1/transforms/passthrough", Some(&token), None).0 == 200,
        &logs,
    );
    let source = format!("{run}.in");
    let rows: Vec<(Option<String>, String)> = (0..10).map(|i| (None, format!("v{i}"))).collect();
    produce(&source, 1, &rows).await;
    for round in 0..ROUNDS {
        let sink = format!("{run}.out-{round}");
        weir_tests::create_topic(&sink, 1).await;
        let spec = format!(
            "[source]\ntopics = [\"{source}\"]\n[[transforms]]\nname = \"t\"\ntransform = \"passthrough\"\n\
             [sink]\ntopic = \"{sink}\"\n[checkpoint]\ninterval_ms = 100\n"
        );
        let path = format!("/v1/pipelines/p{round}");
        let barrier = std::sync::Barrier::new(2);
        let answers: [(u16, Value); 2] = std::thread::scope(|scope| {
            let calls = [&first, &second].map(|node| {
                let (barrier, path, spec, token) = (&barrier, &path, &spec, &token);
                scope.spawn(move || {
                    barrier.wait();
                    node.call("PUT", path, Some(token), toml_body(spec))
                })
            });
            calls.map(|call| call.join().expect("a deploy"))
        });
        let statuses = answers.each_ref().map(|(status, _)| *status);
        assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "round {round}: {answers:?}\n{}", logs());
        assert!(statuses.iter().all(|s| [200, 201, 409].contains(s)), "round {round}: {answers:?}");
        let mut reader = Reader::new(&sink, 1, Isolation::ReadCommitted);
        reader.read_until(rows.len(), RUN_TIMEOUT);
        reader.drain(Duration::from_secs(3));
        assert_eq!(reader.records.len(), rows.len(), "round {round}: the source read once\n{}", logs());
    }
}
