//! The test broker's secured listeners (`scripts/kafka.sh`, issue 43): where they are, the CA
//! files and the test users, read from the `secured.env` file the script writes at every start,
//! and [`acl`] to grant or revoke ACLs with Kafka's own `kafka-acls` tool.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::bootstrap;
use crate::broker::kafka_sh;

/// The secured listeners of the test broker and what a client needs to use them.
///
/// The SSL listener authenticates only the broker (no client certificate), so its clients are
/// `User:ANONYMOUS`, a super user; on the SASL_SSL and SASL_PLAINTEXT listeners (SCRAM-SHA-512,
/// SCRAM-SHA-256, PLAIN, and OAUTHBEARER with unsecured JWTs) the KRaft `StandardAuthorizer` checks
/// ACLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secured {
    /// Bootstrap servers of the `SSL` listener (TLS, server certificate only), e.g. `127.0.0.1:9102`.
    pub ssl: String,
    /// Bootstrap servers of the `SASL_SSL` listener, e.g. `127.0.0.1:9103`.
    pub sasl_ssl: String,
    /// Bootstrap servers of the `SASL_PLAINTEXT` listener (the same mechanisms without TLS), e.g.
    /// `127.0.0.1:9112`.
    pub sasl_plaintext: String,
    /// PEM file of the CA that signed the broker's certificate (SANs `127.0.0.1`, `localhost`):
    /// librdkafka's `ssl.ca.location`.
    pub ca: PathBuf,
    /// PEM file of a CA that did not sign the broker's certificate: a client trusting only it
    /// fails the TLS handshake.
    pub untrusted_ca: PathBuf,
    /// The super user's (name, password): `super.users` lists `User:admin`.
    pub admin: (String, String),
    /// A user with no rights but the ACLs a test grants it: (name, password).
    pub user: (String, String),
}

/// The `secured.env` file: `WEIR_KAFKA_SECURED_ENV` if set, else `secured.env` in
/// `WEIR_KAFKA_DIR`, else in `~/.cache/weir/kafka-run-<port>` (kafka.sh's default run directory)
/// for the port of [`bootstrap`].
pub fn secured_env_path() -> PathBuf {
    if let Some(path) = std::env::var_os("WEIR_KAFKA_SECURED_ENV") {
        return PathBuf::from(path);
    }
    let run_dir = std::env::var_os("WEIR_KAFKA_DIR").map_or_else(
        || {
            let servers = bootstrap();
            let port = servers.rsplit(':').next().unwrap_or("9092").to_owned();
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/weir").join(format!("kafka-run-{port}"))
        },
        PathBuf::from,
    );
    run_dir.join("secured.env")
}

/// The test broker's secured listeners, from [`secured_env_path`].
///
/// # Panics
/// When the file is missing (the broker was started by a kafka.sh without secured listeners, or
/// not at all) or lacks a key, saying how to restart the broker.
pub fn secured() -> Secured {
    let path = secured_env_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; start the broker with its secured listeners: \
             scripts/kafka.sh stop && scripts/kafka.sh start",
            path.display()
        )
    });
    let values: HashMap<&str, &str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .collect();
    let get = |key: &str| -> String {
        (*values.get(key).unwrap_or_else(|| {
            panic!(
                "{} has no {key}: restart the broker (scripts/kafka.sh stop && scripts/kafka.sh start)",
                path.display()
            )
        }))
        .to_owned()
    };
    Secured {
        ssl: get("SSL_BROKERS"),
        sasl_ssl: get("SASL_SSL_BROKERS"),
        sasl_plaintext: get("SASL_PLAINTEXT_BROKERS"),
        ca: PathBuf::from(get("CA_PEM")),
        untrusted_ca: PathBuf::from(get("UNTRUSTED_CA_PEM")),
        admin: (get("ADMIN_USER"), get("ADMIN_PASSWORD")),
        user: (get("CLIENT_USER"), get("CLIENT_PASSWORD")),
    }
}

/// Runs Kafka's `kafka-acls` tool (`org.apache.kafka.tools.AclCommand`, one JVM start: about 2 s)
/// with `args` against the broker's PLAINTEXT listener, whose clients are the super user
/// `User:ANONYMOUS`; returns its standard output. `--force` is added to `--remove` so it does not
/// ask. E.g. `acl(&["--add", "--allow-principal", "User:weir", "--operation", "Read", "--topic", t])`.
///
/// The tool returns once the controller has committed the change; the broker, the same process
/// here, applies it to its authorizer milliseconds later.
///
/// # Panics
/// When the tool fails, with its standard error.
pub fn acl(args: &[&str]) -> String {
    let servers = bootstrap();
    let mut command = vec!["run", "org.apache.kafka.tools.AclCommand", "--bootstrap-server", &servers];
    command.extend_from_slice(args);
    if args.contains(&"--remove") && !args.contains(&"--force") {
        command.push("--force");
    }
    kafka_sh(&command)
}
