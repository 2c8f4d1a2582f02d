//! The test PostgreSQL of `scripts/postgres.sh` (user `weir`, database `weir`), throwaway
//! tables in it, and private clusters for the tests that stop or restart a database.

use std::process::Command;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use serde_json::Value;

use crate::repo_root;

/// The password of user `weir` on every cluster `scripts/postgres.sh` makes.
pub const PASSWORD: &str = "weir-secret";

/// The environment variable test pipeline files read the password from (`${env:…}`).
pub const PASSWORD_ENV: &str = "WEIR_TEST_POSTGRES_PASSWORD";

/// The flight-delays output as a table: one column per field of the plugin's JSON objects.
pub const DELAYS_COLUMNS: &str = "origin text NOT NULL, carrier text NOT NULL, flights bigint, departed bigint, \
     delayed bigint, total_dep_delay bigint, max_dep_delay bigint, mean_dep_delay double precision";

/// The port of the shared test cluster (`WEIR_POSTGRES_PORT`, by default 5433).
pub fn port() -> u16 {
    std::env::var("WEIR_POSTGRES_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(5433)
}

/// The URL of database `weir` on the cluster at `port`, without the password.
pub fn url(port: u16) -> String {
    format!("postgresql://weir@127.0.0.1:{port}/weir")
}

/// Runs `work` with a connection to database `weir` on the cluster at `port`, on a thread of
/// its own: the synchronous client runs a Tokio runtime, which must not start inside the test's.
///
/// # Panics
/// When the cluster is not running, saying how to start it.
pub fn with_client<T: Send>(port: u16, work: impl FnOnce(&mut Client) -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let config =
                    format!("host=127.0.0.1 port={port} user=weir password={PASSWORD} dbname=weir connect_timeout=10");
                let mut client = Client::connect(&config, NoTls)
                    .unwrap_or_else(|e| panic!("no PostgreSQL on port {port} ({e}): run scripts/postgres.sh start"));
                work(&mut client)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Runs `sql` (statements separated by `;`) on the cluster at `port`.
pub fn execute(port: u16, sql: &str) {
    with_client(port, |client| client.batch_execute(sql)).unwrap_or_else(|e| panic!("`{sql}`: {e}"));
}

/// A table name no other test run uses (lower case: Weir takes plain identifiers).
pub fn table_name(prefix: &str) -> String {
    crate::unique_name(prefix).replace('-', "_").to_lowercase()
}

/// The `[sink.postgres]` table of a test pipeline file (it follows the `[sink]` lines).
pub fn sink_table(port: u16, table: &str, mode: &str, extra: &str) -> String {
    let key = if mode == "upsert" { "key = [\"origin\", \"carrier\"]\n" } else { "" };
    format!(
        "\n[sink.postgres]\nurl = \"{}\"\npassword = \"${{env:{PASSWORD_ENV}}}\"\ntable = \"{table}\"\nmode = \"{mode}\"\n{key}{extra}",
        url(port)
    )
}

/// Global ids of the prepared transactions of `pipeline` on the cluster at `port`.
pub fn prepared(port: u16, pipeline: &str) -> Vec<String> {
    let pattern = format!("weir:{pipeline}:%");
    with_client(port, |client| {
        let rows = client.query("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1", &[&pattern]);
        rows.expect("read pg_prepared_xacts").iter().map(|row| row.get(0)).collect()
    })
}

/// Every row of `table` as a JSON object, in the order of `order_by`.
pub fn rows(port: u16, table: &str, order_by: &str) -> Vec<Value> {
    let sql = format!("SELECT row_to_json(t)::text FROM {table} t ORDER BY {order_by}");
    with_client(port, |client| {
        let rows = client.query(&sql, &[]).expect("read the table");
        rows.iter().map(|row| serde_json::from_str(row.get(0)).expect("row JSON")).collect()
    })
}

/// A query's single number (0 for null), or `None` while the database is unreachable.
pub fn scalar(port: u16, sql: &str) -> Option<i64> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let config =
                    format!("host=127.0.0.1 port={port} user=weir password={PASSWORD} dbname=weir connect_timeout=5");
                let mut client = Client::connect(&config, NoTls).ok()?;
                let row = client.query_one(sql, &[]).ok()?;
                Some(row.get::<_, Option<i64>>(0).unwrap_or(0))
            })
            .join()
            .ok()
            .flatten()
    })
}

/// Waits until `sql` (a scalar) reaches `at_least`; panics after `timeout` with `context()`.
pub fn wait_for(port: u16, sql: &str, at_least: i64, timeout: Duration, context: impl Fn() -> String) {
    let started = Instant::now();
    while scalar(port, sql).unwrap_or(-1) < at_least {
        assert!(started.elapsed() < timeout, "`{sql}` never reached {at_least}:\n{}", context());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A cluster of its own on `port` (a temporary directory), for a test that stops or restarts
/// it; stopped on drop.
pub struct Cluster {
    /// Its port.
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts a new cluster on `port` with `scripts/postgres.sh`.
    pub fn start(port: u16) -> Self {
        let cluster = Cluster { port, dir: tempfile::tempdir().expect("temporary directory") };
        cluster.script("start");
        cluster
    }

    /// `scripts/postgres.sh <command>` on this cluster.
    pub fn script(&self, command: &str) {
        self.script_with(command, &[]);
    }

    /// `scripts/postgres.sh <command>` on this cluster, with more environment variables (e.g.
    /// `WEIR_POSTGRES_MAX_PREPARED`).
    pub fn script_with(&self, command: &str, env: &[(&str, &str)]) {
        let output = Command::new(repo_root().join("scripts/postgres.sh"))
            .arg(command)
            .envs(env.iter().copied())
            .env("WEIR_POSTGRES_PORT", self.port.to_string())
            .env("WEIR_POSTGRES_DIR", self.dir.path())
            .output()
            .expect("run scripts/postgres.sh");
        assert!(
            output.status.success(),
            "scripts/postgres.sh {command} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/postgres.sh"))
            .arg("stop")
            .env("WEIR_POSTGRES_PORT", self.port.to_string())
            .env("WEIR_POSTGRES_DIR", self.dir.path())
            .output();
    }
}
