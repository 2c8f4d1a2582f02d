//! Where a task's output goes: the sink's topics, the PostgreSQL table's rows and the
//! dead-letter topic, through the open epoch's producer; a worker sends its tasks' output
//! itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dead_letter::DeadLetter;
use super::task::Task;
use crate::config::SinkConfig;
use crate::error::PipelineError;
use crate::kafka::ProducerSlot;
use crate::metrics::{BatchFigures, PipelineMetrics};
use crate::postgres::{self, PendingRows, Refusal, TableShape};
use crate::record::{Outputs, TopicRules};

/// Where a task's output goes: the open epoch's producer slot and the sink's topics; a worker
/// sends its tasks' output itself.
#[derive(Clone)]
pub(super) struct Out {
    pub(super) slot: Arc<ProducerSlot>,
    pub(super) sink: Arc<SinkConfig>,
    /// What the dead-letter topic refuses: a dead letter keeps its record's timestamp only
    /// where the topic takes it.
    pub(super) dead_letter_rules: Arc<TopicRules>,
    pub(super) metrics: Arc<PipelineMetrics>,
    /// With `[sink.postgres]`: the table's columns, and the open epoch's rows.
    pub(super) rows: Option<(Arc<TableShape>, Arc<PendingRows>)>,
}

impl Out {
    /// Sends a task's output and dead letters (each output carries its timestamp: the operator
    /// gave those without one their batch's last record's, or their timer's). `input` is what
    /// made them (no records for timers), for the task's metrics.
    /// Returns the output's key and value bytes.
    pub(super) fn send(
        &self,
        task: &Task,
        outputs: &Outputs,
        dead_letters: &[DeadLetter],
        input: &Input,
    ) -> Result<u64, PipelineError> {
        let sending = Instant::now();
        let (mut rows, mut refused) = (Vec::new(), Vec::new());
        for output in outputs.iter() {
            if let Some((table, _)) = self.rows.as_ref().filter(|_| self.sink.to_postgres(output.output)) {
                match table.row(task.id(), output.key, output.value) {
                    Ok(row) => rows.push(row),
                    Err(reason) => refused.push(Refusal::of(task.id(), output.key, output.value, reason)),
                }
                continue;
            }
            // Validation gives the default output a topic unless the table takes it.
            let topic = match output.output {
                Some(name) => &self.sink.outputs[name],
                None => self.sink.topic.as_deref().unwrap_or_default(),
            };
            self.slot.send(topic, output).map_err(PipelineError::kafka_with(|| format!("producing to {topic}")))?;
        }
        postgres::refuse(&self.slot, &self.sink, refused)?;
        if let Some((_, pending)) = self.rows.as_ref().filter(|_| !rows.is_empty()) {
            pending.push(rows);
        }
        if let Some(topic) = &self.sink.dead_letter_topic {
            let now_ms = crate::time::now_ms();
            let records: Vec<_> =
                dead_letters.iter().map(|d| d.to_output(task.max_record(), &self.dead_letter_rules, now_ms)).collect();
            for dead_letter in Outputs::from_records(&records).iter() {
                self.slot
                    .send(topic, dead_letter)
                    .map_err(PipelineError::kafka_with(|| format!("producing to {topic}")))?;
            }
        }
        task.metrics().producer(sending.elapsed());
        let output_bytes = outputs.bytes();
        for dead_letter in dead_letters {
            self.metrics.guest_error(&dead_letter.error);
            let record = &dead_letter.record;
            self.metrics.dead_letter(&dead_letter.error, &record.topic, record.partition, record.offset);
        }
        task.metrics().batch(&BatchFigures {
            records_in: input.records,
            bytes_in: input.bytes,
            records_out: outputs.len() as u64,
            bytes_out: output_bytes,
            dead_letters: dead_letters.len() as u64,
            duration: input.took,
        });
        task.metrics().position(task.next_offset());
        Ok(output_bytes)
    }
}

/// What a task's output was made from, for its metrics.
pub(super) struct Input {
    /// Input records (none for fired timers) and their key and value bytes.
    pub(super) records: u64,
    pub(super) bytes: u64,
    /// How long the task worked on it.
    pub(super) took: Duration,
}
