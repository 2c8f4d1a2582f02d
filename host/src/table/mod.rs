//! Tables (`[[source.tables]]`): topics read as keyed tables and joined with every source record
//! before the first transform sees it (docs/event-time.md, "Tables").
//!
//! A table holds the latest value per key (a null value deletes its key), in memory. It is read
//! to its last stable offset at every start, before any record is processed, then followed
//! between batches. A record whose lookup key (its JSON fields `key_fields`, joined by `|`) the
//! table holds gets the value in the header `weir.table.<name>`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use serde_json::Value;

use crate::config::{SourceConfig, TableConfig};
use crate::error::PipelineError;
use crate::kafka::{ReadBatch, TopicReader};
use crate::wasm::ResourcePool;

/// Prefix of the header a joined record gets; the table's name follows.
pub const HEADER_PREFIX: &str = "weir.table.";

/// Most records of a table read before they are applied, at start.
const LOAD_BATCH: usize = 4096;

/// Every table of a pipeline.
pub struct Tables {
    tables: Vec<Table>,
}

/// One table: its rows and the reader that follows its topic.
struct Table {
    header: String,
    reader: TopicReader,
    rows: Rows,
}

/// The latest value per key of one table.
struct Rows {
    config: TableConfig,
    values: HashMap<Vec<u8>, Vec<u8>>,
    /// Bytes of keys and values in `values`.
    bytes: usize,
    /// The pool `bytes` are memory of, if any (a tenant's under `weir serve`).
    pool: Option<Arc<ResourcePool>>,
}

impl Tables {
    /// Reads every table of `source` to its last stable offset, then starts following them,
    /// with readers in the pipeline's consumer group `group` ([`TopicReader::new`]: never
    /// joined). `timeout` bounds the wait for a partition's leader and for each fetch. The
    /// tables' keys and values are memory of `pool`, if given.
    ///
    /// # Errors
    /// [`PipelineError::Refused`] when a table's topic does not exist or the table outgrows
    /// its `max_mb` or the pool's memory; a Kafka error when reading fails.
    pub fn load(
        source: &SourceConfig,
        group: &str,
        timeout: Duration,
        pool: Option<&Arc<ResourcePool>>,
    ) -> Result<Self, PipelineError> {
        let mut tables = Vec::with_capacity(source.tables.len());
        for config in &source.tables {
            let reader = TopicReader::new(&source.cluster, &source.consumer, &config.topic, group)
                .map_err(PipelineError::kafka(format!("creating the reader of table {}", config.name)))?;
            let mut table = Table {
                header: format!("{HEADER_PREFIX}{}", config.name),
                reader,
                rows: Rows { config: config.clone(), values: HashMap::new(), bytes: 0, pool: pool.cloned() },
            };
            table.load(timeout)?;
            tables.push(table);
        }
        Ok(Self { tables })
    }

    /// Applies the table records fetched since the last call, without waiting.
    ///
    /// # Errors
    /// A failed fetch, or a table outgrowing its `max_mb` or its pool's memory.
    pub fn poll(&mut self) -> Result<(), PipelineError> {
        for table in &mut self.tables {
            while let Some(record) = table.reader.next_now() {
                let (key, value) = record
                    .map_err(PipelineError::kafka_with(|| format!("reading table {}", table.rows.config.name)))?;
                table.rows.apply(key, value)?;
            }
        }
        Ok(())
    }

    /// The headers a source record of value `value` gets from the tables, after its own: per
    /// table that holds the record's lookup key, `weir.table.<name>` with that key's value (name
    /// and value bytes). None without tables, or for a value that is not a JSON object.
    pub fn headers(&self, value: Option<&[u8]>) -> Vec<(&[u8], Option<&[u8]>)> {
        if self.tables.is_empty() {
            return Vec::new();
        }
        let Some(Value::Object(fields)) = value.and_then(|v| serde_json::from_slice(v).ok()) else {
            return Vec::new();
        };
        let found = self.tables.iter().filter_map(|table| {
            let key = lookup_key(&fields, &table.rows.config.key_fields)?;
            let value = table.rows.values.get(key.as_bytes())?;
            Some((table.header.as_bytes(), Some(value.as_slice())))
        });
        found.collect()
    }
}

impl Table {
    /// Reads every partition from its start offset to its last stable offset.
    fn load(&mut self, timeout: Duration) -> Result<(), PipelineError> {
        let config = &self.rows.config;
        let name = config.name.clone();
        let partitions = self.reader.partitions(timeout).map_err(|error| match error {
            KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition) => PipelineError::Refused(format!(
                "table {name} (source.tables): its topic {} does not exist; create it (compacted, keyed by the \
                 lookup key, e.g. with `weir produce --key {}`) or fix source.tables[].topic",
                config.topic,
                config.key_fields.join(",")
            )),
            error => PipelineError::kafka(format!("reading the metadata of table {name}"))(error),
        })?;
        let (mut from, mut until) = (BTreeMap::new(), BTreeMap::new());
        for partition in 0..partitions {
            let (start, end) = self
                .reader
                .range(partition, timeout)
                .map_err(PipelineError::kafka(format!("reading the offsets of table {name}, partition {partition}")))?;
            if end > start {
                from.insert(partition, start);
                until.insert(partition, end);
            }
        }
        let kafka = |error| PipelineError::kafka(format!("reading table {name}"))(error);
        let rows = &mut self.rows;
        self.reader.read(&from, &until, LOAD_BATCH, timeout, kafka, |_, batch: ReadBatch, _| {
            batch.into_iter().try_for_each(|(key, value, _)| rows.apply(key, value))
        })?;
        // Follow every partition from where the load stopped (or from its end when empty).
        let mut next = BTreeMap::new();
        for partition in 0..partitions {
            let end = match until.get(&partition) {
                Some(end) => *end,
                None => {
                    self.reader
                        .range(partition, timeout)
                        .map_err(PipelineError::kafka(format!(
                            "reading the offsets of table {name}, partition {partition}"
                        )))?
                        .1
                }
            };
            next.insert(partition, end);
        }
        self.reader.follow(&next).map_err(PipelineError::kafka(format!("following table {name}")))?;
        let rows = &self.rows;
        tracing::info!(table = %name, topic = %rows.config.topic, keys = rows.values.len(), bytes = rows.bytes, "table loaded");
        Ok(())
    }
}

impl Rows {
    /// Applies one table record: the latest value of its key, or its deletion.
    fn apply(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), PipelineError> {
        let key_len = key.len();
        let before = self.bytes;
        let old = match value {
            Some(value) => {
                self.bytes += key_len + value.len();
                self.values.insert(key, value)
            }
            None => self.values.remove(&key),
        };
        if let Some(old) = old {
            self.bytes -= old.len() + key_len;
        }
        if self.bytes > self.config.max_bytes {
            return Err(PipelineError::Refused(format!(
                "table {} holds {} bytes of keys and values, more than source.tables[].max_mb allows ({} MiB); \
                 raise max_mb, or keep fewer keys in topic {}",
                self.config.name,
                self.bytes,
                self.config.max_bytes >> 20,
                self.config.topic
            )));
        }
        if let Some(pool) = &self.pool {
            if self.bytes < before {
                pool.shrink(before - self.bytes);
            } else if !pool.grow(self.bytes - before) {
                // What the pool granted, which the drop gives back: the pipeline stops.
                self.bytes = before;
                return Err(PipelineError::Refused(format!(
                    "table {} holds {} bytes of keys and values, more than the memory {} has left on this node \
                     ({} of {} MiB max_total_memory_mb used by {}); keep \
                     fewer keys in topic {}, or ask the operator for more memory",
                    self.config.name,
                    self.bytes,
                    pool.owner(),
                    pool.memory_used() >> 20,
                    pool.memory_limit() >> 20,
                    crate::wasm::MEMORY_USES,
                    self.config.topic
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Rows {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.shrink(self.bytes);
        }
    }
}

/// The key `fields` of a record's JSON object form, joined by `|` (a string as its text, another
/// value as its JSON text); `None` when one is missing or null.
fn lookup_key(object: &serde_json::Map<String, Value>, fields: &[String]) -> Option<String> {
    let mut key = String::new();
    for (index, field) in fields.iter().enumerate() {
        if index > 0 {
            key.push('|');
        }
        match object.get(field)? {
            Value::Null => return None,
            Value::String(text) => key.push_str(text),
            other => key.push_str(&other.to_string()),
        }
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(text: &str) -> serde_json::Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn lookup_keys_join_fields_as_weir_produce_does() {
        let fields = ["origin".to_owned(), "time_hour".to_owned()];
        let flight = object(r#"{"origin": "EWR", "time_hour": "2013-01-01T10:00:00Z", "dep_delay": 2}"#);
        assert_eq!(lookup_key(&flight, &fields).as_deref(), Some("EWR|2013-01-01T10:00:00Z"));
        let numbers = object(r#"{"origin": "EWR", "time_hour": 7, "x": 1.5}"#);
        assert_eq!(lookup_key(&numbers, &fields).as_deref(), Some("EWR|7"));
        assert_eq!(lookup_key(&object(r#"{"origin": "EWR"}"#), &fields), None);
        assert_eq!(lookup_key(&object(r#"{"origin": "EWR", "time_hour": null}"#), &fields), None);
    }
}
