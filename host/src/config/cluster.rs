//! `[kafka]`: one Kafka cluster's connection settings, shared by every client Weir opens for it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use super::secret;

/// The librdkafka properties that say how to reach and authenticate to a cluster. They belong in
/// `[kafka]` (or `[sink.kafka]`), and a per-client table (`source.consumer`, `sink.producer`)
/// may not set them: every client of a cluster must connect the same way. Listed exactly, or as
/// a prefix when they end with `.`.
pub const CONNECTION_KEYS: &[&str] =
    &["bootstrap.servers", "metadata.broker.list", "security.protocol", "sasl.", "ssl."];

/// Whether `key` is one of [`CONNECTION_KEYS`].
pub fn is_connection_key(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    CONNECTION_KEYS.iter().any(|k| if k.ends_with('.') { key.starts_with(k) } else { key == *k })
}

/// A Kafka cluster: `bootstrap.servers` and the client-security properties (`security.protocol`,
/// `sasl.*`, `ssl.*`) or any other librdkafka global property every client of the cluster gets.
/// Secret references are resolved ([`secret`]). The Kafka connector's `client_config` is the one
/// constructor of a librdkafka configuration, and takes one of these.
///
/// Its `Debug` and [`Self::display_properties`] redact secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClusterConfig {
    properties: BTreeMap<String, String>,
}

impl ClusterConfig {
    /// A cluster reached at `bootstrap_servers` (`host:port,...`) with librdkafka's defaults
    /// (`security.protocol=plaintext`).
    pub fn new(bootstrap_servers: &str) -> Self {
        Self { properties: BTreeMap::from([("bootstrap.servers".to_owned(), bootstrap_servers.to_owned())]) }
    }

    /// A cluster from resolved properties (`bootstrap.servers` among them).
    pub fn from_properties(properties: BTreeMap<String, String>) -> Self {
        Self { properties }
    }

    /// The cluster of a `--kafka-config` file (like Kafka's tools' `--command-config`): its
    /// `[kafka]` table when it has one (a pipeline file or a `serve.toml`), else its top-level
    /// keys; `brokers`, when given, sets `bootstrap.servers`.
    ///
    /// # Errors
    /// The file cannot be read or is not TOML, or as [`Self::from_table`].
    pub fn from_file(path: &Path, brokers: Option<&str>) -> anyhow::Result<Self> {
        let what = format!("--kafka-config {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {what}: {e}"))?;
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{what} is not TOML: {e}"))?;
        let mut table = match table.remove("kafka") {
            Some(toml::Value::Table(kafka)) => kafka,
            _ => table,
        };
        if let Some(brokers) = brokers {
            table.insert("bootstrap.servers".to_owned(), toml::Value::String(brokers.to_owned()));
        }
        let cluster = Self::from_table(table, &what)?;
        if cluster.bootstrap_servers().trim().is_empty() {
            anyhow::bail!("{what} has no `bootstrap.servers`: add it, or give --brokers");
        }
        Ok(cluster)
    }

    /// The cluster of a `[kafka]` table read by serde (`serve.toml`'s), references resolved;
    /// `what` names the table in errors.
    ///
    /// # Errors
    /// A value is not a string, number or boolean; a reference cannot be resolved or a secret is
    /// written literally ([`secret::resolve`]).
    pub fn from_table(table: toml::Table, what: &str) -> anyhow::Result<Self> {
        let mut properties = BTreeMap::new();
        for (key, value) in table {
            let value = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => anyhow::bail!(
                    "{what}: `{key}` is a {}; librdkafka properties are strings, numbers or booleans",
                    other.type_str()
                ),
            };
            let value = secret::resolve(&key, &value).map_err(|e| anyhow::anyhow!("{what}: `{key}`: {e}"))?;
            properties.insert(key, value);
        }
        Ok(Self { properties })
    }

    /// The same cluster reached as SASL user `user` with `password` and `mechanism` (e.g.
    /// `SCRAM-SHA-512`): every `sasl.*` property replaced by these three. The password is
    /// remembered for [`secret::redact`]. (`weir serve` runs a tenant's pipelines so.)
    pub fn as_user(&self, mechanism: &str, user: &str, password: &str) -> Self {
        secret::remember(password);
        let mut properties: BTreeMap<String, String> = self
            .properties
            .iter()
            .filter(|(key, _)| !key.starts_with("sasl."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, value) in [("sasl.mechanism", mechanism), ("sasl.username", user), ("sasl.password", password)] {
            properties.insert(key.to_owned(), value.to_owned());
        }
        Self { properties }
    }

    /// `bootstrap.servers`, e.g. `kafka-1:9092,kafka-2:9092`: how messages name the cluster.
    pub fn bootstrap_servers(&self) -> &str {
        self.properties.get("bootstrap.servers").map_or("", String::as_str)
    }

    /// `security.protocol` as written, lower-cased; librdkafka's default `plaintext` when unset.
    pub fn security_protocol(&self) -> String {
        self.properties.get("security.protocol").map_or_else(|| "plaintext".to_owned(), |p| p.to_ascii_lowercase())
    }

    /// The properties, secrets resolved: only for building a client.
    pub(crate) fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }

    /// The properties as they may be shown: secrets as [`secret::REDACTED`].
    pub fn display_properties(&self) -> BTreeMap<&str, &str> {
        self.properties.iter().map(|(k, v)| (k.as_str(), secret::display_value(k, v))).collect()
    }
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.display_properties()).finish()
    }
}

impl fmt::Display for ClusterConfig {
    /// The bootstrap servers, and the protocol unless it is plaintext: `kafka:9093 (SASL_SSL)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.security_protocol().as_str() {
            "plaintext" => write!(f, "{}", self.bootstrap_servers()),
            protocol => write!(f, "{} ({})", self.bootstrap_servers(), protocol.to_ascii_uppercase()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_a_secret() {
        let cluster = ClusterConfig::from_properties(BTreeMap::from([
            ("bootstrap.servers".to_owned(), "k:9093".to_owned()),
            ("security.protocol".to_owned(), "SASL_SSL".to_owned()),
            ("sasl.password".to_owned(), "pa55word-literal".to_owned()),
        ]));
        let shown = format!("{cluster:?} {cluster}");
        assert!(!shown.contains("pa55word"), "{shown}");
        assert!(shown.contains("sasl.password") && shown.contains(secret::REDACTED), "{shown}");
        assert_eq!(cluster.to_string(), "k:9093 (SASL_SSL)");
        assert_eq!(ClusterConfig::new("k:9092").to_string(), "k:9092");
    }

    #[test]
    fn connection_keys_are_the_security_and_address_properties() {
        for key in ["bootstrap.servers", "security.protocol", "sasl.mechanism", "SSL.CA.LOCATION", "sasl.password"] {
            assert!(is_connection_key(key), "{key}");
        }
        for key in ["fetch.min.bytes", "linger.ms", "client.id", "sslx"] {
            assert!(!is_connection_key(key), "{key}");
        }
    }

    #[test]
    fn a_kafka_config_file_is_a_kafka_table_or_bare_keys() {
        let dir = tempfile::tempdir().unwrap();
        let pipeline = dir.path().join("pipeline.toml");
        std::fs::write(
            &pipeline,
            "name = \"x\"\n[kafka]\n\"bootstrap.servers\" = \"a:1\"\n\"socket.timeout.ms\" = 5000\n",
        )
        .unwrap();
        let cluster = ClusterConfig::from_file(&pipeline, None).unwrap();
        assert_eq!(cluster.bootstrap_servers(), "a:1");
        assert_eq!(cluster.properties()["socket.timeout.ms"], "5000");
        let bare = dir.path().join("client.toml");
        std::fs::write(&bare, "\"security.protocol\" = \"SSL\"\n").unwrap();
        assert!(ClusterConfig::from_file(&bare, None).unwrap_err().to_string().contains("bootstrap.servers"));
        assert_eq!(ClusterConfig::from_file(&bare, Some("b:2")).unwrap().to_string(), "b:2 (SSL)");
        std::fs::write(&bare, "\"sasl.password\" = \"literal\"\n").unwrap();
        let err = ClusterConfig::from_file(&bare, Some("b:2")).unwrap_err().to_string();
        assert!(err.contains("sasl.password") && !err.contains("literal"), "{err}");
    }
}
