//! `--brokers` and `--kafka-config`: how the Kafka tools (`produce`, `consume`, `txn`) reach a
//! cluster, with the same settings a pipeline's `[kafka]` table holds.

use std::path::PathBuf;

use clap::Args;
use weir::ClusterConfig;

/// The cluster a tool talks to.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Bootstrap servers (`bootstrap.servers`); overrides the --kafka-config file's. Default
    /// 127.0.0.1:9092 when no --kafka-config is given.
    #[arg(long, env = "WEIR_KAFKA_BOOTSTRAP")]
    brokers: Option<String>,
    /// The cluster's connection settings (TLS, SASL): a pipeline file or serve.toml (their
    /// [kafka] table), or a TOML file of librdkafka properties, as Kafka's tools take
    /// --command-config. Secrets as ${env:NAME} or ${file:/path}.
    #[arg(long, value_name = "FILE", env = "WEIR_KAFKA_CONFIG")]
    kafka_config: Option<PathBuf>,
}

impl ClusterArgs {
    /// The cluster these arguments name.
    ///
    /// # Errors
    /// See [`ClusterConfig::from_file`].
    pub fn cluster(&self) -> anyhow::Result<ClusterConfig> {
        match &self.kafka_config {
            Some(path) => ClusterConfig::from_file(path, self.brokers.as_deref()),
            None => Ok(ClusterConfig::new(self.brokers.as_deref().unwrap_or("127.0.0.1:9092"))),
        }
    }
}
