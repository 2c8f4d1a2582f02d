//! Why a producer's records could not be written: what the broker refused, with its topic.
//!
//! A transactional producer whose record or partition the broker refuses (a missing Write ACL,
//! a timestamp outside the topic's limits, a record the topic cannot take) enters librdkafka's
//! abortable-error state: it purges what is queued, and every later `produce` fails with a bare
//! `Local: Erroneous state` that names neither the cause nor the topic. librdkafka says both only
//! in its log, at the moment of the refusal: `TXNERR` (the transaction's error, with its code's
//! name) and `ADDPARTS` (each partition AddPartitionsToTxn refused). [`FailureLog`] keeps those
//! lines per transaction, so the error can say what happened. A delivery report names its record's
//! topic, for producers without transactions.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::fmt;
use std::sync::Mutex;

use rdkafka::bindings as rdsys;
use rdkafka::error::RDKafkaErrorCode;

/// What the broker (or librdkafka) refused of a producer's records, and its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceFailure {
    /// The code of the refusal, e.g. `TopicAuthorizationFailed` or `InvalidTimestamp`:
    /// [`super::classify_code`] says whether a retry can help.
    pub code: RDKafkaErrorCode,
    /// librdkafka's account of it, naming the topic and partition.
    pub reason: String,
}

impl fmt::Display for ProduceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ProduceFailure {}

/// The refusal of the open transaction, as librdkafka logs it; cleared when a transaction begins.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    inner: Mutex<Logged>,
}

#[derive(Debug, Default)]
struct Logged {
    /// The transaction's error: code and librdkafka's reason.
    failure: Option<ProduceFailure>,
    /// Partitions AddPartitionsToTxn refused: (topic, reason) and the partitions.
    partitions: BTreeMap<(String, String), Vec<i32>>,
    /// The first failed delivery (producers without transactions).
    delivery: Option<ProduceFailure>,
}

/// Prefix of librdkafka's `TXNERR` line for an abortable transaction error
/// (`rd_kafka_txn_set_abortable_error0`), followed by `<state>: <reason> (<CODE_NAME>…)`.
const TRANSACTION_FAILED: &str = "Current transaction failed in state ";
/// Prefix of librdkafka's `ADDPARTS` line for a refused partition.
const PARTITION_REFUSED: &str = "Failed to add partition ";

impl FailureLog {
    /// Notes a log line of the producer; only `TXNERR` and `ADDPARTS` lines matter.
    pub(crate) fn note_log(&self, facility: &str, line: &str) {
        let mut logged = self.lock();
        match facility {
            "TXNERR" if logged.failure.is_none() => logged.failure = parse_transaction_failure(line),
            "ADDPARTS" => {
                // Partitions skipped because another was refused say OPERATION_NOT_ATTEMPTED.
                if let Some((topic, partition, reason)) = parse_refused_partition(line)
                    && !reason.contains("not attempted")
                {
                    logged.partitions.entry((topic.to_owned(), reason.to_owned())).or_default().push(partition);
                }
            }
            _ => {}
        }
    }

    /// Notes a failed delivery of a record for `topic`'s `partition`. Records purged by an abort
    /// (or by the refusal of their transaction) are consequences, not causes, and are skipped.
    pub(crate) fn note_delivery(&self, topic: &str, partition: i32, code: Option<RDKafkaErrorCode>, error: &str) {
        let Some(code) =
            code.filter(|code| *code != RDKafkaErrorCode::PurgeQueue && *code != RDKafkaErrorCode::PurgeInflight)
        else {
            return;
        };
        self.lock().delivery.get_or_insert_with(|| ProduceFailure {
            code,
            reason: format!("the broker refused a record for {topic} [{partition}]: {error}"),
        });
    }

    /// Forgets what the last transaction logged.
    pub(crate) fn clear(&self) {
        *self.lock() = Logged::default();
    }

    /// The refusal of the open transaction, with the partitions refused, else the first failed
    /// delivery.
    pub(crate) fn failure(&self) -> Option<ProduceFailure> {
        let logged = self.lock();
        match &logged.failure {
            Some(failure) if logged.partitions.is_empty() => Some(failure.clone()),
            Some(failure) => {
                let partitions: Vec<String> = logged
                    .partitions
                    .iter()
                    .map(|((topic, reason), partitions)| {
                        let mut partitions = partitions.clone();
                        partitions.sort_unstable();
                        let partitions: Vec<String> = partitions.iter().map(i32::to_string).collect();
                        format!("{topic} [{}]: {reason}", partitions.join(", "))
                    })
                    .collect();
                Some(ProduceFailure {
                    code: failure.code,
                    reason: format!("{}; refused partitions: {}", failure.reason, partitions.join("; ")),
                })
            }
            None => logged.delivery.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Logged> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The failure a `TXNERR` line reports: e.g. `Current transaction failed in state InTransaction:
/// ProduceRequest for t [0] with 1 message(s) failed: Broker: Invalid timestamp (…): current
/// transaction must be aborted (INVALID_TIMESTAMP)`. librdkafka's log prefix (`[thrd:…]: `) is
/// dropped.
fn parse_transaction_failure(line: &str) -> Option<ProduceFailure> {
    let text = &line[line.find(TRANSACTION_FAILED)? + TRANSACTION_FAILED.len()..];
    let (_state, text) = text.split_once(": ")?;
    let (reason, name) = text.rsplit_once(" (")?;
    let name = name.trim_end_matches(')').split(',').next()?.trim();
    Some(ProduceFailure {
        code: code_named(name)?,
        reason: format!("the broker refused the open transaction: {reason}"),
    })
}

/// The (topic, partition, reason) of an `ADDPARTS` line: `Failed to add partition "out" [0] to
/// transaction: Broker: Topic authorization failed`.
fn parse_refused_partition(line: &str) -> Option<(&str, i32, &str)> {
    let text = &line[line.find(PARTITION_REFUSED)? + PARTITION_REFUSED.len()..];
    let (topic, text) = text.strip_prefix('"')?.split_once("\" [")?;
    let (partition, text) = text.split_once(']')?;
    let reason = text.split_once(": ")?.1;
    Some((topic, partition.parse().ok()?, reason))
}

/// The error code librdkafka names `name` (`rd_kafka_err2name`, e.g. `TOPIC_AUTHORIZATION_FAILED`,
/// `_STATE`), from librdkafka's own table of codes.
fn code_named(name: &str) -> Option<RDKafkaErrorCode> {
    let mut descs: *const rdsys::rd_kafka_err_desc = std::ptr::null();
    let mut count = 0;
    // SAFETY: librdkafka hands out its static table of error descriptions.
    unsafe { rdsys::rd_kafka_get_err_descs(&mut descs, &mut count) };
    if descs.is_null() {
        return None;
    }
    // SAFETY: the table has `count` entries and lives as long as the library.
    let table = unsafe { std::slice::from_raw_parts(descs, count) };
    table.iter().find_map(|desc| {
        if desc.name.is_null() {
            return None;
        }
        // SAFETY: a non-null name is a static C string.
        let named = unsafe { CStr::from_ptr(desc.name) };
        (named.to_bytes() == name.as_bytes()).then(|| RDKafkaErrorCode::from(desc.code))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_error_line_gives_its_code_and_reason() {
        let log = FailureLog::default();
        log.note_log(
            "TXNERR",
            "[thrd:main]: Current transaction failed in state InTransaction: ProduceRequest for out [2] with 1 \
             message(s) failed: Broker: Invalid timestamp (broker 1 PID{Id:1,Epoch:0}, base seq 0): current \
             transaction must be aborted (INVALID_TIMESTAMP)",
        );
        let failure = log.failure().expect("a failure");
        assert_eq!(failure.code, RDKafkaErrorCode::InvalidTimestamp);
        assert!(failure.reason.contains("out [2]") && failure.reason.contains("Invalid timestamp"), "{failure}");
    }

    #[test]
    fn refused_partitions_are_named_and_skipped_ones_left_out() {
        let log = FailureLog::default();
        log.note_log(
            "ADDPARTS",
            "[thrd:sasl_ssl://127.0.0.1:9103/1]: Failed to add partition \"out\" [1] to transaction: Broker: Topic authorization failed",
        );
        log.note_log(
            "ADDPARTS",
            "Failed to add partition \"out\" [0] to transaction: Broker: Topic authorization failed",
        );
        log.note_log(
            "ADDPARTS",
            "Failed to add partition \"changelog\" [1] to transaction: Broker: Operation not attempted",
        );
        log.note_log(
            "TXNERR",
            "Current transaction failed in state InTransaction: Failed to add partition(s) to transaction on broker \
             b/1: Broker: Topic authorization failed (after 2 ms) (TOPIC_AUTHORIZATION_FAILED, requires epoch bump)",
        );
        let failure = log.failure().expect("a failure");
        assert_eq!(failure.code, RDKafkaErrorCode::TopicAuthorizationFailed);
        assert!(
            failure.reason.contains("refused partitions: out [0, 1]: Broker: Topic authorization failed"),
            "{failure}"
        );
        assert!(!failure.reason.contains("changelog"), "{failure}");
        log.clear();
        assert_eq!(log.failure(), None);
    }

    #[test]
    fn deliveries_purged_by_an_abort_are_not_the_cause() {
        let log = FailureLog::default();
        log.note_delivery("out", 0, Some(RDKafkaErrorCode::PurgeQueue), "Local: Purged in queue");
        assert_eq!(log.failure(), None);
        log.note_delivery("out", 1, Some(RDKafkaErrorCode::InvalidRecord), "Broker: Invalid record");
        let failure = log.failure().expect("a failure");
        assert_eq!(failure.code, RDKafkaErrorCode::InvalidRecord);
        assert!(failure.reason.contains("out [1]"), "{failure}");
    }

    #[test]
    fn unknown_names_give_no_code() {
        assert_eq!(code_named("TOPIC_AUTHORIZATION_FAILED"), Some(RDKafkaErrorCode::TopicAuthorizationFailed));
        assert_eq!(code_named("_STATE"), Some(RDKafkaErrorCode::State));
        assert_eq!(code_named("NO_SUCH_ERROR"), None);
    }
}
