//! Weir against a secured cluster, the test broker's SSL and SASL_SSL listeners
//! (`scripts/kafka.sh`): the tools over TLS through `--kafka-config`; the flight-delays pipeline
//! exactly once over SASL_SSL with the documented ACLs, its password redacted everywhere, and a
//! missing ACL refused; refused credentials, certificates and host names stopping with a message.

use std::process::Command;
use std::time::Duration;

use weir_tests::flights::verify;
use weir_tests::pipeline::{
    RUN_TIMEOUT, Reader, Spec, TestPipeline, http_get, keyed, produce, run_to_completion, wait_exit,
};
use weir_tests::secured::{Secured, acl, secured};
use weir_tests::{Isolation, flight_rows, weir_binary};

/// Partitions of the secured pipelines' topics.
const PARTITIONS: i32 = 4;

/// The environment variable the secured pipelines' `sasl.password` refers to.
const PASSWORD_VARIABLE: &str = "WEIR_TEST_KAFKA_PASSWORD";

/// Runs `weir <args>` with `env`; returns (success, stdout, stderr).
fn weir(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    // The cluster is the --kafka-config file's or the pipeline's: no bootstrap from the test run.
    let output = Command::new(weir_binary())
        .args(args)
        .env_remove("WEIR_KAFKA_BOOTSTRAP")
        .envs(env.iter().copied())
        .output()
        .expect("run weir");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `weir produce`, `consume` and `txn list` through `--kafka-config`, over every security
/// protocol and SASL mechanism librdkafka is built for: SSL; SASL_SSL with SCRAM-SHA-256 and
/// OAUTHBEARER (librdkafka's unsecured JWTs, which the test broker's
/// `OAuthBearerUnsecuredValidatorCallbackHandler` accepts; the OIDC flow needs an identity
/// provider, which cannot run here); SASL_PLAINTEXT with PLAIN and SCRAM-SHA-512. (SASL_SSL with
/// SCRAM-SHA-512 is the pipeline test's.) The passwords are `${env:…}` references.
#[tokio::test(flavor = "multi_thread")]
async fn the_tools_produce_consume_and_list_transactions_over_every_protocol_and_mechanism() {
    let secured = secured();
    let dir = tempfile::tempdir().unwrap();
    let ca = format!("\"ssl.ca.location\" = \"{}\"\n", secured.ca.display());
    let (admin, admin_password) = &secured.admin;
    let sasl = |servers: &str, protocol: &str, mechanism: &str| {
        format!(
            "\"bootstrap.servers\" = \"{servers}\"\n\"security.protocol\" = \"{protocol}\"\n\
             \"sasl.mechanism\" = \"{mechanism}\"\n\"sasl.username\" = \"{admin}\"\n\
             \"sasl.password\" = \"${{env:{PASSWORD_VARIABLE}}}\"\n{}",
            if protocol == "SASL_SSL" { ca.as_str() } else { "" }
        )
    };
    let configs = [
        ("tls", format!("\"bootstrap.servers\" = \"{}\"\n\"security.protocol\" = \"SSL\"\n{ca}", secured.ssl)),
        ("sasl-ssl-scram-256", sasl(&secured.sasl_ssl, "SASL_SSL", "SCRAM-SHA-256")),
        ("sasl-plaintext-plain", sasl(&secured.sasl_plaintext, "SASL_PLAINTEXT", "PLAIN")),
        ("sasl-plaintext-scram-512", sasl(&secured.sasl_plaintext, "SASL_PLAINTEXT", "SCRAM-SHA-512")),
        (
            "oauthbearer",
            format!(
                "\"bootstrap.servers\" = \"{}\"\n\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"OAUTHBEARER\"\n\
                 \"enable.sasl.oauthbearer.unsecure.jwt\" = \"true\"\n\"sasl.oauthbearer.config\" = \"principal={admin}\"\n{ca}",
                secured.sasl_ssl
            ),
        ),
    ];
    let env = [(PASSWORD_VARIABLE, admin_password.as_str())];
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, (0..50).map(|i| format!("{{\"id\":{i}}}\n")).collect::<String>()).unwrap();
    for (name, text) in configs {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        let kafka_config = file.to_str().unwrap();
        let topic = weir_tests::unique_name(&format!("weir-{name}"));
        let (ok, _, stderr) =
            weir(&["produce", "--kafka-config", kafka_config, "--topic", &topic, input.to_str().unwrap()], &env);
        assert!(ok, "weir produce over {name}: {stderr}");
        let (ok, stdout, stderr) = weir(
            &["consume", "--kafka-config", kafka_config, "--topic", &topic, "--from-beginning", "--timeout", "2"],
            &env,
        );
        assert!(ok, "weir consume over {name}: {stderr}");
        assert_eq!(stdout.lines().count(), 50, "{name}: {stdout}");
        let (ok, stdout, stderr) =
            weir(&["txn", "list", "--kafka-config", kafka_config, "--prefix", "weir-tls", "--output", "json"], &env);
        assert!(ok, "weir txn list over {name}: {stderr}");
        assert!(stdout.contains("transactional_ids"), "{name}: {stdout}");
    }
}

/// Points `pipeline`'s file at the SASL_SSL listener as `user`, SCRAM-SHA-512: its
/// `source.brokers` becomes a `[kafka]` table whose password is `${env:WEIR_TEST_KAFKA_PASSWORD}`.
fn over_sasl_ssl(pipeline: &TestPipeline, secured: &Secured, user: &str) {
    let text = std::fs::read_to_string(&pipeline.file).unwrap();
    let brokers_line = format!("brokers = \"{}\"\n", weir_tests::bootstrap());
    assert!(text.contains(&brokers_line), "{text}");
    let kafka = format!(
        "\n[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"security.protocol\" = \"SASL_SSL\"\n\
         \"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"{user}\"\n\
         \"sasl.password\" = \"${{env:{PASSWORD_VARIABLE}}}\"\n\"ssl.ca.location\" = \"{}\"\n",
        secured.sasl_ssl,
        secured.ca.display()
    );
    std::fs::write(&pipeline.file, text.replacen(&brokers_line, "", 1) + &kafka).unwrap();
}

/// The `kafka-acls.sh` commands of docs/configuration.md's "ACLs" section (the lines starting
/// with `$acl`), for `pipeline` and `principal`: each is the list of arguments after `--add`.
/// The docs' names (pipeline `flight-delays`, source `flights`, principal
/// `User:weir-flight-delays`) are replaced by the pipeline's; the sink topic stands for the
/// dead-letter topic too, as the docs' comment says.
fn documented_acls(pipeline: &TestPipeline, principal: &str) -> Vec<Vec<String>> {
    let docs = std::fs::read_to_string(weir_tests::repo_root().join("docs/configuration.md")).unwrap();
    let section = &docs[docs.find("### ACLs").expect("docs/configuration.md has an ACLs section")..];
    let commands: Vec<Vec<String>> = section
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter_map(|line| line.strip_prefix("$acl "))
        .map(|line| {
            let line = line.split('#').next().unwrap();
            let mut args = vec!["--allow-principal".to_owned(), principal.to_owned()];
            let mut flag = "";
            for word in line.split_whitespace() {
                let names: Vec<String> = match (flag, word) {
                    ("--topic", "flights") => vec![pipeline.source.clone()],
                    ("--topic", "flight-delays") => vec![pipeline.sink.clone(), pipeline.dead_letters.clone()],
                    ("--topic", "flight-delays-changelog") => vec![format!("{}-changelog", pipeline.name)],
                    ("--group", "weir-flight-delays") => vec![format!("weir-{}", pipeline.name)],
                    ("--transactional-id", "flight-delays") => vec![pipeline.name.clone()],
                    ("--topic" | "--group" | "--transactional-id", name) => panic!("the docs name {flag} {name}"),
                    _ => vec![word.to_owned()],
                };
                if names.len() > 1 {
                    // One name per flag: `--topic a --topic b`.
                    args.push(names[0].clone());
                    for name in &names[1..] {
                        args.push(flag.to_owned());
                        args.push(name.clone());
                    }
                } else {
                    args.extend(names);
                }
                flag = if word.starts_with("--") { word } else { "" };
            }
            args
        })
        .collect();
    assert!(commands.len() >= 5, "the docs' ACL commands: {commands:?}");
    commands
}

/// The one ACL of `commands` that allows `operation` on the resource `flag name` (e.g. `Read`,
/// `--group`, `weir-x`), as `acl --add`/`--remove` arguments: the documented command naming that
/// resource, with its other operations and resources left out.
fn only(commands: &[Vec<String>], operation: &str, flag: &str, name: &str) -> Vec<String> {
    let command = commands
        .iter()
        .find(|c| c.windows(2).any(|w| w[0] == flag && w[1] == name) && c.iter().any(|w| w == operation))
        .unwrap_or_else(|| panic!("the docs grant no {operation} on {flag} {name}: {commands:?}"));
    let mut right = Vec::new();
    let mut words = command.iter();
    while let Some(word) = words.next() {
        let value = words.next().expect("flags have values");
        let keep = match word.as_str() {
            "--operation" => value == operation,
            "--topic" | "--group" | "--transactional-id" => word == flag && value == name,
            _ => true,
        };
        if keep {
            right.extend([word.clone(), value.clone()]);
        }
    }
    right
}

/// Runs `acl --add` (or `--remove`) with each of `commands`.
fn grant(operation: &str, commands: &[Vec<String>]) {
    for command in commands {
        let mut args = vec![operation];
        args.extend(command.iter().map(String::as_str));
        acl(&args);
    }
}

/// What `pipeline` prints and serves, for the redaction check: its log, `weir status` (table
/// and JSON) and, while it runs with `--metrics`, every route of the metrics server.
fn everything_shown(pipeline: &TestPipeline, address: &str, env: &[(&str, &str)]) -> String {
    let mut shown = String::new();
    for route in ["/metrics", "/api/pipelines", "/readyz", "/healthz", "/"] {
        let (_, body) = http_get(&format!("http://{address}{route}"));
        shown.push_str(&body.to_string());
    }
    for json in [false, true] {
        let file = pipeline.file.to_str().unwrap();
        let args: Vec<&str> = if json { vec!["status", file, "--output", "json"] } else { vec!["status", file] };
        let (ok, stdout, stderr) = weir(&args, env);
        assert!(ok, "weir status over SASL_SSL: {stderr}");
        assert!(stdout.contains(&pipeline.name) || json, "{stdout}");
        shown.push_str(&stdout);
        shown.push_str(&stderr);
    }
    shown.push_str(&pipeline.log_text());
    shown
}

/// The flight-delays pipeline over SASL_SSL (SCRAM-SHA-512) as a user with exactly the ACLs the
/// docs list: exactly-once output, the password nowhere in what Weir prints or serves; with any one
/// of the rights it uses taken away (Read on the group and the source topic, Write on the sink
/// topic, the changelog topic and the transactional ids, DescribeConfigs on the sink topic), a
/// restart stops with a message naming
/// the refusal and the resource (no retry loop); with every right granted again, the next run
/// completes the output exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn flight_delays_run_exactly_once_over_sasl_ssl_with_the_documented_acls() {
    let secured = secured();
    let (user, password) = &secured.user;
    let env = [(PASSWORD_VARIABLE, password.as_str())];
    let pipeline = TestPipeline::new("weir-sasl", &Spec::new("flight-delays"));
    over_sasl_ssl(&pipeline, &secured, user);
    for topic in [&pipeline.sink, &pipeline.dead_letters] {
        weir_tests::create_topic(topic, PARTITIONS).await;
    }
    let acls = documented_acls(&pipeline, &format!("User:{user}"));
    grant("--add", &acls);

    let rows = flight_rows(4_000);
    let (first, second) = rows.split_at(2_000);
    produce(&pipeline.source, PARTITIONS, &keyed(first)).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    let mut run = pipeline.spawn_with(&["--metrics", "127.0.0.1:0"], &env);
    let address = pipeline.metrics_address(&mut run);
    let read = reader.read_until(first.len(), RUN_TIMEOUT);
    assert_eq!(read, first.len(), "outputs over SASL_SSL; log:\n{}", pipeline.log_text());
    let mut shown = everything_shown(&pipeline, &address, &env);
    let savepoint = pipeline.dir().join("savepoint");
    let (ok, stdout, stderr) = weir(&["savepoint", pipeline.file.to_str().unwrap(), savepoint.to_str().unwrap()], &env);
    assert!(ok, "weir savepoint over SASL_SSL: {stderr}");
    assert!(savepoint.read_dir().unwrap().next().is_some(), "the savepoint is written: {stdout}");
    shown.push_str(&stdout);
    shown.push_str(&stderr);
    assert!(pipeline.stop(&mut run, Duration::from_secs(60)).success(), "{}", pipeline.log_text());
    assert!(shown.contains("checkpoint committed") && shown.contains(&pipeline.source), "shown: {shown}");
    assert!(!shown.contains(password.as_str()), "the password is shown:\n{shown}");

    // Each right the pipeline uses, taken away alone: the start stops, naming the refusal and
    // the resource; granted again, the next right is taken away. New input arrives meanwhile.
    let changelog = format!("{}-changelog", pipeline.name);
    let group = format!("weir-{}", pipeline.name);
    let refusals = [
        ("Read", "--group", group.as_str(), "Group authorization failed"),
        ("Read", "--topic", pipeline.source.as_str(), "Topic authorization failed"),
        ("Write", "--topic", pipeline.sink.as_str(), "Topic authorization failed"),
        ("Write", "--topic", changelog.as_str(), "Topic authorization failed"),
        ("Write", "--transactional-id", pipeline.name.as_str(), "Transactional Id authorization failed"),
        ("DescribeConfigs", "--topic", pipeline.sink.as_str(), "Topic authorization failed"),
    ];
    let mut batches = second.chunks(second.len().div_ceil(refusals.len() + 2));

    // Taken away while the pipeline runs: its next transaction is refused, and it stops.
    let (before, after) = (batches.next().unwrap(), batches.next().unwrap());
    let mut running = pipeline.spawn(&env);
    produce(&pipeline.source, PARTITIONS, &keyed(before)).await;
    let read = reader.read_until(first.len() + before.len(), RUN_TIMEOUT);
    assert!(read >= first.len() + before.len(), "outputs before the refusal; log:\n{}", pipeline.log_text());
    let write = only(&acls, "Write", "--topic", &pipeline.sink);
    grant("--remove", std::slice::from_ref(&write));
    produce(&pipeline.source, PARTITIONS, &keyed(after)).await;
    let status = wait_exit(&mut running, RUN_TIMEOUT)
        .unwrap_or_else(|| panic!("the running pipeline did not stop without Write; log:\n{}", pipeline.log_text()));
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    assert!(
        log.lines()
            .any(|line| line.contains("Topic authorization failed") && line.contains(&format!("{} [", pipeline.sink))),
        "the stop names the refused sink topic: {log}"
    );
    grant("--add", &[write]);

    for ((operation, flag, resource, reason), batch) in refusals.into_iter().zip(batches) {
        let right = only(&acls, operation, flag, resource);
        grant("--remove", std::slice::from_ref(&right));
        produce(&pipeline.source, PARTITIONS, &keyed(batch)).await;
        let earlier = pipeline.log_text().len();
        let mut refused = pipeline.spawn(&env);
        let status = wait_exit(&mut refused, RUN_TIMEOUT).unwrap_or_else(|| {
            panic!("no stop without {operation} on {flag} {resource}; log:\n{}", pipeline.log_text())
        });
        let log = pipeline.log_text().split_off(earlier);
        assert!(!status.success(), "{log}");
        let stop = log.lines().find(|line| line.contains("the cluster refuses")).unwrap_or_else(|| panic!("{log}"));
        assert!(stop.contains(reason), "without {operation} on {resource}, the message names the refusal: {stop}");
        assert!(stop.contains(resource), "the message names {resource}: {stop}");
        assert!(stop.contains("grant the pipeline's principal the ACLs"), "the message says what to do: {stop}");
        grant("--add", &[right]);
    }

    run_to_completion(&pipeline, &mut reader, rows.len(), &env);
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
}

/// Refused credentials and certificates, and a secret reference that does not resolve: the tools
/// and `weir run` stop with one message naming the refusal (not librdkafka's retry loop, not a
/// bare "no broker"), and never print the password. The cases run as concurrent processes.
#[tokio::test(flavor = "multi_thread")]
async fn refused_credentials_and_certificates_stop_with_a_message_naming_them() {
    let secured = secured();
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, lines: &[String]| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.to_str().unwrap().to_owned()
    };
    let sasl = |user: &str, variable: &str| {
        vec![
            format!("\"bootstrap.servers\" = \"{}\"", secured.sasl_ssl),
            "\"security.protocol\" = \"SASL_SSL\"".to_owned(),
            "\"sasl.mechanism\" = \"SCRAM-SHA-512\"".to_owned(),
            format!("\"sasl.username\" = \"{user}\""),
            format!("\"sasl.password\" = \"${{env:{variable}}}\""),
            format!("\"ssl.ca.location\" = \"{}\"", secured.ca.display()),
        ]
    };
    let wrong_password = "not-the-weir-secret";
    let (user, _) = &secured.user;
    let untrusted = config(
        "untrusted",
        &[
            format!("\"bootstrap.servers\" = \"{}\"", secured.ssl),
            "\"security.protocol\" = \"SSL\"".to_owned(),
            format!("\"ssl.ca.location\" = \"{}\"", secured.untrusted_ca.display()),
        ],
    );
    // The broker's certificate names 127.0.0.1 and localhost; the same address written as an
    // IPv4-mapped IPv6 address reaches the same listener under a name the certificate lacks.
    let port = secured.ssl.rsplit(':').next().unwrap();
    let mismatch = |check: &str| {
        vec![
            format!("\"bootstrap.servers\" = \"[::ffff:127.0.0.1]:{port}\""),
            "\"security.protocol\" = \"SSL\"".to_owned(),
            format!("\"ssl.ca.location\" = \"{}\"", secured.ca.display()),
            format!("\"ssl.endpoint.identification.algorithm\" = \"{check}\""),
        ]
    };
    let unchecked = config("unchecked", &mismatch("none"));
    let cases = [
        ("host name mismatch", config("mismatch", &mismatch("https")), "SSL handshake failed"),
        ("wrong password", config("wrong-password", &sasl(user, PASSWORD_VARIABLE)), "invalid credentials"),
        ("unknown user", config("unknown-user", &sasl("no-such-user", PASSWORD_VARIABLE)), "invalid credentials"),
        ("untrusted CA", untrusted, "SSL handshake failed"),
        ("unset variable", config("unset", &sasl(user, "WEIR_TEST_UNSET_VARIABLE")), "${env:WEIR_TEST_UNSET_VARIABLE}"),
    ];
    let topic = weir_tests::unique_name("weir-refused");
    let tools: Vec<_> = cases
        .iter()
        .map(|(_, file, _)| {
            Command::new(weir_binary())
                .args(["consume", "--kafka-config", file, "--topic", &topic, "--timeout", "1"])
                .env_remove("WEIR_KAFKA_BOOTSTRAP")
                .env_remove("WEIR_TEST_UNSET_VARIABLE")
                .env(PASSWORD_VARIABLE, wrong_password)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("run weir consume")
        })
        .collect();

    // A pipeline with the wrong password stops too, rather than retry.
    let pipeline = TestPipeline::new("weir-refused", &Spec::new("passthrough"));
    over_sasl_ssl(&pipeline, &secured, user);
    let mut run = pipeline.spawn(&[(PASSWORD_VARIABLE, wrong_password)]);

    for ((case, _, expected), tool) in cases.iter().zip(tools) {
        let output = tool.wait_with_output().expect("weir consume");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message = stderr.lines().find(|line| line.starts_with("error: ")).unwrap_or_default();
        assert!(!output.status.success(), "{case}: {stderr}");
        assert!(message.contains(expected), "{case}: the message names the refusal ({expected}): {stderr}");
        assert!(!stderr.contains(wrong_password), "{case}: the password is shown: {stderr}");
        if *case != "unset variable" {
            assert!(message.contains("the cluster refuses"), "{case}: {stderr}");
        } else {
            assert!(message.contains("sasl.password"), "{case}: the message names the key: {stderr}");
        }
    }
    // The control: without the host name check the same address connects (and finds no topic).
    let (ok, _, stderr) = weir(&["consume", "--kafka-config", &unchecked, "--topic", &topic, "--timeout", "1"], &[]);
    assert!(!ok && stderr.contains("does not exist"), "the mismatch address connects unchecked: {stderr}");
    let status = wait_exit(&mut run, RUN_TIMEOUT)
        .unwrap_or_else(|| panic!("weir run with a wrong password did not stop; log:\n{}", pipeline.log_text()));
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    let stop = log.lines().find(|line| line.contains("the cluster refuses")).unwrap_or_else(|| panic!("{log}"));
    assert!(stop.contains("invalid credentials") && stop.contains("SCRAM-SHA-512"), "{stop}");
    assert!(!log.contains(wrong_password), "the password is shown: {log}");
}
