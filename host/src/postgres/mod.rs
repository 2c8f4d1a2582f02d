//! The PostgreSQL sink: one output of the chain written to a table, exactly once through a
//! two-phase commit whose decision is the checkpoint's Kafka transaction (docs/sinks.md).
//!
//! Per epoch with rows, at the barrier: `BEGIN`, the rows (one `INSERT … SELECT FROM
//! json_populate_recordset` per set of fields, `ON CONFLICT … DO UPDATE` for upserts), then
//! `PREPARE TRANSACTION '<gid>'` ([`xid`]); the checkpoint's Kafka transaction commits; then
//! `COMMIT PREPARED`. A crash anywhere leaves at most the prepared transaction, which the next
//! start (or the instance taking the partitions over) commits or rolls back as Kafka's
//! committed offsets say ([`PostgresSink::resolve`]). Under `"at-least-once"` and `"none"` the
//! rows commit right after the Kafka side, without `PREPARE`.
//!
//! The client is the `postgres` crate (tokio-postgres underneath), without TLS.

mod rows;
mod xid;

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use postgres::{Client, NoTls, Statement};

pub use rows::{Column, ColumnKind, PendingRows, Refusal, Row, TableShape, merge_per_key};
pub use xid::{MAX_GID_LEN, Resolution, Xid, decide, prefix};

use crate::config::{OnError, PostgresSinkConfig, SinkConfig, WriteMode};
use crate::error::PipelineError;
use crate::kafka::{GroupOffset, ProducerSlot};
use crate::record::Outputs;
use crate::types::TaskId;
use crate::wasm::{Header, OutputRecord};

/// A prepared transaction of a pipeline, as `pg_prepared_xacts` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Its global id, read.
    pub xid: Xid,
    /// When it was prepared, as PostgreSQL prints a `timestamptz`.
    pub prepared_at: String,
}

/// A connection to a PostgreSQL database: the sink's, or `weir txn`'s.
pub struct Database {
    client: Client,
    /// `host:port/dbname`, for messages.
    server: String,
}

/// A connection to the sink's database, with the table's shape.
pub struct PostgresSink {
    db: Database,
    config: PostgresSinkConfig,
    shape: Arc<TableShape>,
    /// The insert statement of each set of fields met, prepared once.
    statements: HashMap<Vec<String>, Statement>,
}

impl Database {
    /// Connects to `url` (libpq's forms) with `password` within `timeout`. The session's lock
    /// waits are bounded by it too (`lock_timeout`), so that a row locked by another transaction
    /// (one prepared and left behind) fails a checkpoint into recovery, rather than hang it; a
    /// statement itself may take longer (an epoch of many rows).
    ///
    /// # Errors
    /// [`PipelineError::Postgres`] when the server cannot be reached (retried by recovery);
    /// [`PipelineError::Refused`] for a URL that is no connection string.
    pub fn connect(url: &str, password: Option<&str>, timeout: Duration) -> Result<Self, PipelineError> {
        let mut settings = postgres::Config::from_str(url)
            .map_err(|e| PipelineError::Refused(format!("{url:?} is not a PostgreSQL connection string: {e}")))?;
        if let Some(password) = password {
            settings.password(password);
        }
        let ms = timeout.as_millis();
        settings
            .application_name("weir")
            .connect_timeout(timeout)
            .options(&format!("-c lock_timeout={ms} -c idle_in_transaction_session_timeout=0"));
        let server = describe(&settings);
        let client = settings
            .connect(NoTls)
            .map_err(PipelineError::postgres(format!("connecting to PostgreSQL at {server} (sink.postgres.url)")))?;
        Ok(Self { client, server })
    }

    /// `host:port/dbname`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Refuses to start when the server cannot keep a prepared transaction for this instance:
    /// `max_prepared_transactions` (0 by default) must leave room for one beside those prepared
    /// now.
    ///
    /// # Errors
    /// [`PipelineError::Refused`] naming the setting; [`PipelineError::Postgres`].
    pub fn check_prepared_capacity(&mut self) -> Result<(), PipelineError> {
        let row = self
            .client
            .query_one(
                "SELECT current_setting('max_prepared_transactions')::int, (SELECT count(*)::int FROM pg_prepared_xacts)",
                &[],
            )
            .map_err(PipelineError::postgres("reading max_prepared_transactions"))?;
        let (max, used): (i32, i32) = (row.get(0), row.get(1));
        if max - used < 1 {
            return Err(PipelineError::Refused(format!(
                "PostgreSQL at {} has max_prepared_transactions = {max} with {used} prepared now: the exactly-once \
                 PostgreSQL sink prepares one transaction per instance at each checkpoint (PREPARE TRANSACTION). \
                 Set max_prepared_transactions to at least twice the pipeline's instances (postgresql.conf, then \
                 restart PostgreSQL), and resolve prepared transactions left behind (weir txn list --postgres)",
                self.server
            )));
        }
        Ok(())
    }

    /// `COMMIT PREPARED` (or `ROLLBACK PREPARED`) of `gid`. `Ok(false)` when no such prepared
    /// transaction exists any more (another instance resolved it).
    ///
    /// # Errors
    /// [`PipelineError::Postgres`].
    pub fn finish_prepared(&mut self, gid: &str, commit: bool) -> Result<bool, PipelineError> {
        let verb = if commit { "COMMIT PREPARED" } else { "ROLLBACK PREPARED" };
        match self.client.batch_execute(&format!("{verb} {}", literal(gid))) {
            Ok(()) => Ok(true),
            Err(error) if error.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => Ok(false),
            Err(error) => Err(PipelineError::postgres(format!("{verb} '{gid}'"))(error)),
        }
    }

    /// The prepared transactions of `pipeline` in the sink's database.
    ///
    /// # Errors
    /// [`PipelineError::Postgres`].
    pub fn prepared(&mut self, pipeline: &str) -> Result<Vec<Prepared>, PipelineError> {
        let rows = self
            .client
            .query(
                "SELECT gid, prepared::text FROM pg_prepared_xacts \
                 WHERE database = current_database() AND starts_with(gid, $1) ORDER BY prepared",
                &[&prefix(pipeline)],
            )
            .map_err(PipelineError::postgres("reading pg_prepared_xacts"))?;
        Ok(rows
            .iter()
            .filter_map(|row| Some(Prepared { xid: Xid::parse(row.get(0))?, prepared_at: row.get(1) }))
            .collect())
    }

    /// Commits or rolls back each prepared transaction of `pipeline` that Kafka's evidence
    /// decides ([`decide`] over `group`, the group's stable offsets of every source partition);
    /// the undecided stay. Returns each with its resolution (`Undecided`: left).
    ///
    /// # Errors
    /// [`PipelineError::Postgres`].
    pub fn resolve(
        &mut self,
        pipeline: &str,
        group: &BTreeMap<TaskId, GroupOffset>,
        txn_prefix: &str,
        settled: impl Fn(&str) -> bool,
    ) -> Result<Vec<(Xid, Resolution)>, PipelineError> {
        let mut done = Vec::new();
        for prepared in self.prepared(pipeline)? {
            let resolution = decide(&prepared.xid, group, txn_prefix, &settled);
            if resolution != Resolution::Undecided {
                let gid = prepared.xid.gid();
                let found = self.finish_prepared(&gid, resolution == Resolution::Commit)?;
                tracing::info!(
                    gid,
                    ?resolution,
                    found,
                    "resolved a prepared transaction of the PostgreSQL sink by the consumer group's committed offsets"
                );
            }
            done.push((prepared.xid, resolution));
        }
        Ok(done)
    }
}

impl PostgresSink {
    /// Connects ([`Database::connect`]) and reads the table's columns. An upsert's key columns
    /// must be the columns of a unique index or the primary key.
    ///
    /// # Errors
    /// [`PipelineError::Postgres`] when the server cannot be reached (retried by recovery);
    /// [`PipelineError::Refused`] when the table or a key column is missing.
    pub fn connect(config: &PostgresSinkConfig, timeout: Duration) -> Result<Self, PipelineError> {
        let mut db = Database::connect(&config.url, config.password.as_deref(), timeout)?;
        let shape = Arc::new(table_shape(&mut db.client, config, &db.server)?);
        Ok(Self { db, config: config.clone(), shape, statements: HashMap::new() })
    }

    /// The database, for resolving prepared transactions.
    pub fn db(&mut self) -> &mut Database {
        &mut self.db
    }

    /// The table's columns, for the workers to check rows against.
    pub fn shape(&self) -> &Arc<TableShape> {
        &self.shape
    }

    /// Opens the epoch's transaction and writes `rows` in it. Returns the rows the table
    /// refused (a constraint, a value PostgreSQL cannot convert), each with PostgreSQL's
    /// message; the others are written. An upsert writes each key once, its rows merged in
    /// order ([`merge_per_key`]).
    ///
    /// # Errors
    /// [`PipelineError::Postgres`] for anything else (the server went away, a lock wait past
    /// `lock_timeout`).
    pub fn write(&mut self, rows: Vec<Row>) -> Result<Vec<(Row, String)>, PipelineError> {
        let rows = match self.config.mode {
            WriteMode::Insert => rows,
            WriteMode::Upsert => merge_per_key(rows, &self.shape.key),
        };
        self.db.client.batch_execute("BEGIN").map_err(PipelineError::postgres("BEGIN"))?;
        let mut by_fields: BTreeMap<Vec<String>, Vec<Row>> = BTreeMap::new();
        for row in rows {
            by_fields.entry(row.fields.keys().cloned().collect()).or_default().push(row);
        }
        let mut refused = Vec::new();
        for (fields, rows) in by_fields {
            let statement = self.statement(&fields)?;
            if self.savepoint(&statement, &rows)?.is_ok() {
                continue;
            }
            // One row spoiled the batch: write them one by one to find which.
            for row in rows {
                if let Err(reason) = self.savepoint(&statement, std::slice::from_ref(&row))? {
                    refused.push((row, reason));
                }
            }
        }
        Ok(refused)
    }

    /// Runs `statement` over `rows` inside a savepoint: `Ok(Err(reason))` when the table refused
    /// them (PostgreSQL's data and integrity errors, SQLSTATE classes 22 and 23), rolled back
    /// to the savepoint.
    fn savepoint(&mut self, statement: &Statement, rows: &[Row]) -> Result<Result<(), String>, PipelineError> {
        let values = format!("[{}]", rows.iter().map(Row::to_json).collect::<Vec<_>>().join(","));
        self.db.client.batch_execute("SAVEPOINT weir_rows").map_err(PipelineError::postgres("SAVEPOINT"))?;
        match self.db.client.execute(statement, &[&values]) {
            Ok(_) => Ok(Ok(())),
            Err(error) if is_refusal(&error) => {
                self.db
                    .client
                    .batch_execute("ROLLBACK TO SAVEPOINT weir_rows")
                    .map_err(PipelineError::postgres("ROLLBACK TO SAVEPOINT"))?;
                Ok(Err(error.as_db_error().map_or_else(|| error.to_string(), |db| db.message().to_owned())))
            }
            Err(error) => Err(PipelineError::postgres(format!("writing rows to table {}", self.config.table))(error)),
        }
    }

    /// `PREPARE TRANSACTION` of the open transaction: its rows are durable and undecided.
    ///
    /// # Errors
    /// [`PipelineError::Postgres`].
    pub fn prepare(&mut self, gid: &str) -> Result<(), PipelineError> {
        self.db
            .client
            .batch_execute(&format!("PREPARE TRANSACTION {}", literal(gid)))
            .map_err(PipelineError::postgres(format!("PREPARE TRANSACTION '{gid}'")))
    }

    /// `COMMIT` of the open transaction (`"at-least-once"`, `"none"`).
    ///
    /// # Errors
    /// [`PipelineError::Postgres`].
    pub fn commit(&mut self) -> Result<(), PipelineError> {
        self.db.client.batch_execute("COMMIT").map_err(PipelineError::postgres("COMMIT"))
    }

    /// The insert of rows with `fields`, prepared once per connection.
    fn statement(&mut self, fields: &[String]) -> Result<Statement, PipelineError> {
        if let Some(statement) = self.statements.get(fields) {
            return Ok(statement.clone());
        }
        let sql = insert_sql(&self.config.table, fields, &self.shape.key, self.config.mode);
        let statement = self.db.client.prepare(&sql).map_err(PipelineError::postgres(format!("preparing `{sql}`")))?;
        self.statements.insert(fields.to_vec(), statement.clone());
        Ok(statement)
    }
}

/// The statement writing a JSON array of rows with `fields` into `table`.
fn insert_sql(table: &str, fields: &[String], key: &[String], mode: WriteMode) -> String {
    let table = table.split('.').map(quote).collect::<Vec<_>>().join(".");
    let columns = fields.iter().map(|f| quote(f)).collect::<Vec<_>>().join(", ");
    let mut sql = format!(
        "INSERT INTO {table} ({columns}) SELECT {columns} FROM json_populate_recordset(NULL::{table}, $1::text::json)"
    );
    if mode == WriteMode::Upsert {
        let key_columns = key.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
        let updates: Vec<String> =
            fields.iter().filter(|f| !key.contains(f)).map(|f| format!("{0} = EXCLUDED.{0}", quote(f))).collect();
        if updates.is_empty() {
            sql.push_str(&format!(" ON CONFLICT ({key_columns}) DO NOTHING"));
        } else {
            sql.push_str(&format!(" ON CONFLICT ({key_columns}) DO UPDATE SET {}", updates.join(", ")));
        }
    }
    sql
}

/// Reads the table's columns and checks the upsert key against its unique indexes.
fn table_shape(client: &mut Client, config: &PostgresSinkConfig, server: &str) -> Result<TableShape, PipelineError> {
    let table = &config.table;
    let columns = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typname::text, t.typcategory::text, \
             a.attgenerated <> '' FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[table],
        )
        .map_err(PipelineError::postgres(format!("reading the columns of table {table}")))?;
    if columns.is_empty() {
        return Err(PipelineError::Refused(format!(
            "table {table} (sink.postgres.table) does not exist in PostgreSQL at {server}, or has no column: create it \
             with a column per field of the output's JSON objects (docs/sinks.md)"
        )));
    }
    let generated: Vec<String> = columns.iter().filter(|row| row.get::<_, bool>(4)).map(|row| row.get(0)).collect();
    let columns: BTreeMap<String, Column> = columns
        .iter()
        .filter(|row| !row.get::<_, bool>(4))
        .map(|row| {
            let (name, type_name, udt, category): (String, String, String, String) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            (name.clone(), Column { name, type_name, kind: ColumnKind::of(&udt, &category) })
        })
        .collect();
    if let Some(missing) = config.key.iter().find(|k| !columns.contains_key(*k)) {
        return Err(PipelineError::Refused(format!(
            "sink.postgres.key names column {missing}, which table {table} does not have (its columns: {})",
            columns.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    if config.mode == WriteMode::Upsert {
        let unique = client
            .query(
                "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                 WHERE i.indrelid = to_regclass($1::text) AND i.indisunique AND i.indpred IS NULL \
                 GROUP BY i.indexrelid",
                &[table],
            )
            .map_err(PipelineError::postgres(format!("reading the unique indexes of table {table}")))?;
        let mut key = config.key.clone();
        key.sort();
        if !unique.iter().any(|row| row.get::<_, Vec<String>>(0) == key) {
            return Err(PipelineError::Refused(format!(
                "sink.postgres.key = [{}] are not the columns of the primary key or of a unique index of table \
                 {table}: an upsert (INSERT … ON CONFLICT) needs one; make one (CREATE UNIQUE INDEX ON {table} ({})) \
                 or name its columns",
                config.key.join(", "),
                config.key.join(", ")
            )));
        }
    }
    let shape = TableShape { table: table.clone(), columns, key: config.key.clone(), generated };
    let described: Vec<String> = shape.columns.values().map(|c| format!("{} {}", c.name, c.type_name)).collect();
    tracing::info!(table, server, columns = %described.join(", "), "PostgreSQL sink table");
    Ok(shape)
}

/// `host:port/dbname` of a connection's settings.
fn describe(settings: &postgres::Config) -> String {
    let host = settings
        .get_hosts()
        .first()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = settings.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", settings.get_dbname().unwrap_or_default())
}

/// Whether the server refused the rows themselves (SQLSTATE class 22, data exception, or 23,
/// integrity constraint violation) rather than failed.
fn is_refusal(error: &postgres::Error) -> bool {
    error.code().is_some_and(|code| code.code().starts_with("22") || code.code().starts_with("23"))
}

/// Rows refused for the PostgreSQL table (by the row checks or by the database): each goes to the dead-letter topic through `slot` (in the
/// open epoch's transaction) with the reason in `weir.error`, or, under `on_error = "fail"`, the
/// first stops the pipeline ([`PipelineError::RowRefused`]).
///
/// # Errors
/// [`PipelineError::RowRefused`], or [`PipelineError::Kafka`] when a dead letter cannot be
/// produced.
pub fn refuse(slot: &ProducerSlot, sink: &SinkConfig, refused: Vec<Refusal>) -> Result<(), PipelineError> {
    let (Some(first), Some(pg)) = (refused.first(), &sink.postgres) else { return Ok(()) };
    let topic = match (&sink.dead_letter_topic, pg.on_error) {
        (Some(topic), OnError::DeadLetter) => topic,
        _ => {
            return Err(PipelineError::RowRefused {
                table: pg.table.clone(),
                task: first.task.to_string(),
                reason: first.reason.clone(),
            });
        }
    };
    let header = |key: &str, value: String| Header { key: key.into(), value: Some(value.into_bytes()) };
    let records: Vec<OutputRecord> = refused
        .into_iter()
        .map(|refusal| OutputRecord {
            headers: vec![
                header("weir.error", refusal.reason),
                header("weir.sink", format!("postgres:{}", pg.table)),
                header("weir.topic", refusal.task.topic.clone()),
                header("weir.partition", refusal.task.partition.to_string()),
            ],
            key: refusal.key,
            value: refusal.value,
            output: None,
            timestamp: None,
        })
        .collect();
    for record in Outputs::from_records(&records).iter() {
        slot.send(topic, record).map_err(PipelineError::kafka_with(|| format!("producing to {topic}")))?;
    }
    Ok(())
}

/// An identifier in double quotes (names are checked plain lower-case identifiers).
fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// A string literal in single quotes.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_and_upserts_name_only_the_fields_given() {
        let fields = ["carrier".to_owned(), "flights".to_owned(), "origin".to_owned()];
        assert_eq!(
            insert_sql("public.delays", &fields, &[], WriteMode::Insert),
            "INSERT INTO \"public\".\"delays\" (\"carrier\", \"flights\", \"origin\") SELECT \"carrier\", \"flights\", \
             \"origin\" FROM json_populate_recordset(NULL::\"public\".\"delays\", $1::text::json)"
        );
        let key = ["origin".to_owned(), "carrier".to_owned()];
        assert!(
            insert_sql("delays", &fields, &key, WriteMode::Upsert)
                .ends_with("ON CONFLICT (\"origin\", \"carrier\") DO UPDATE SET \"flights\" = EXCLUDED.\"flights\"")
        );
        assert!(insert_sql("delays", &key, &key, WriteMode::Upsert).ends_with("DO NOTHING"));
    }
}
