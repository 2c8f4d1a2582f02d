use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
use rdkafka::producer::{BaseProducer, Producer};

use super::*;
use crate::config::ConfigError;
use crate::kafka::{Fenced, ProduceFailure, TransactionFlags, classify_transaction};
use crate::record::RecordLimit;
use crate::types::CheckpointId;
use crate::wasm::LoadError;

const RETRY: Disposition = Disposition::Retry { heals_itself: false };
const HEALS: Disposition = Disposition::Retry { heals_itself: true };
const STOP: Disposition = Disposition::StopPipeline;
const BUG: Disposition = Disposition::Bug;
const STOPPED: Disposition = Disposition::Stopped;

fn kafka(source: KafkaError) -> PipelineError {
    PipelineError::Kafka { operation: "op".into(), source }
}

fn refused(code: Code) -> PipelineError {
    PipelineError::ProduceRefused {
        operation: "op".into(),
        failure: ProduceFailure { code, reason: format!("refused: {code:?}") },
    }
}

fn operator(call: Call, kind: ErrorKind) -> PipelineError {
    PipelineError::Operator(OperatorError { operator: "op".into(), call, offsets: None, kind })
}

fn quota() -> StateError {
    StateError::QuotaExceeded { grow: 10, used: 95, limit: 100 }
}

fn pool_memory() -> StateError {
    StateError::PoolMemory("this batch adds 10 bytes to the 95 of tenant `t`".into())
}

fn limit() -> Box<RecordLimit> {
    Box::new(RecordLimit { bytes: 100, setting: "sink.producer.\"message.max.bytes\"".into() })
}

/// Every kind of operator failure, once of each.
fn operator_kinds() -> Vec<ErrorKind> {
    vec![
        ErrorKind::DeadlineExceeded { deadline: Duration::from_millis(5) },
        ErrorKind::MemoryLimit { limit_bytes: 1 },
        ErrorKind::PoolMemory { owner: "tenant `t`".into(), limit_bytes: 1 },
        ErrorKind::Stopped,
        ErrorKind::GuestPanic { message: "boom".into() },
        ErrorKind::Exit { status: 1 },
        ErrorKind::StackOverflow,
        ErrorKind::Trap { trap: wasmtime::Trap::UnreachableCodeReached },
        ErrorKind::InvalidOutput { reason: "bad".into() },
        ErrorKind::OutputTooLarge { index: 0, bytes: 200, limit: limit() },
        ErrorKind::StateTooLarge { write: "state value of key `k`".into(), bytes: 200, limit: limit() },
        ErrorKind::OutputRefused { index: 0, reason: "a null key into a compacted topic".into() },
        ErrorKind::Guest { message: "no".into(), offset: Some(3) },
        ErrorKind::State(StateError::Backend("cannot read state".into())),
        ErrorKind::State(StateError::Corrupt("malformed meta entry".into())),
        ErrorKind::State(quota()),
        ErrorKind::State(pool_memory()),
        ErrorKind::State(StateError::Poisoned("overlays".into())),
        ErrorKind::EventTime { reason: "no field `ts`".into() },
        ErrorKind::Host { reason: "wasi".into() },
    ]
}

/// What an operator failure of `kind` in a call other than `init` gets.
fn expected_in_a_call(kind: &ErrorKind) -> Disposition {
    match kind {
        ErrorKind::Stopped => STOPPED,
        ErrorKind::OutputTooLarge { .. }
        | ErrorKind::OutputRefused { .. }
        | ErrorKind::StateTooLarge { .. }
        | ErrorKind::EventTime { .. }
        | ErrorKind::State(StateError::QuotaExceeded { .. }) => STOP,
        ErrorKind::State(StateError::Poisoned(_)) => BUG,
        _ => RETRY,
    }
}

/// A PostgreSQL error that is not transient: a connection string that does not parse.
fn postgres_config_error() -> postgres::Error {
    "port=not-a-number".parse::<postgres::Config>().expect_err("an invalid port")
}

/// A PostgreSQL error that is transient: nothing listens on the port.
fn postgres_unreachable() -> postgres::Error {
    let mut config = postgres::Config::new();
    config.host("127.0.0.1").port(1).connect_timeout(Duration::from_secs(2));
    config.connect(postgres::NoTls).err().expect("nothing listens on port 1")
}

/// Every variant of [`PipelineError`] (and the classes and kinds inside them) with the
/// disposition the runner gives it.
fn table() -> Vec<(&'static str, PipelineError, Disposition)> {
    let mut rows: Vec<(&'static str, PipelineError, Disposition)> = vec![
        ("config", ConfigError::invalid("sink.topic", "missing").into(), STOP),
        ("load", LoadError::Engine { reason: "no".into() }.into(), STOP),
        // Kafka, by class: transient and fencing codes heal themselves.
        ("kafka transient", kafka(KafkaError::MessageConsumption(Code::AllBrokersDown)), HEALS),
        ("kafka transient", kafka(KafkaError::Canceled), HEALS),
        ("kafka transient", kafka(KafkaError::Flush(Code::OperationTimedOut)), HEALS),
        ("kafka fenced", kafka(KafkaError::MessageProduction(Code::InvalidProducerEpoch)), HEALS),
        ("kafka fatal", kafka(KafkaError::MessageConsumptionFatal(Code::FencedInstanceId)), HEALS),
        ("kafka missing topic", kafka(KafkaError::MetadataFetch(Code::UnknownTopicOrPartition)), RETRY),
        ("kafka offset out of range", kafka(KafkaError::MessageConsumption(Code::AutoOffsetReset)), RETRY),
        ("kafka configuration", kafka(KafkaError::ClientCreation("bad".into())), STOP),
        ("kafka authorization", kafka(KafkaError::AdminOp(Code::TopicAuthorizationFailed)), STOP),
        ("kafka authorization", kafka(KafkaError::MessageConsumptionFatal(Code::GroupAuthorizationFailed)), STOP),
        ("kafka record refused", kafka(KafkaError::MessageProduction(Code::MessageSizeTooLarge)), STOP),
        ("cluster refused", PipelineError::ClusterRefused { operation: "op".into(), reason: "SASL".into() }, STOP),
        // The open transaction refused, by its code.
        ("produce refused", refused(Code::NotEnoughReplicas), HEALS),
        ("produce refused", refused(Code::ProducerFenced), HEALS),
        ("produce refused", refused(Code::UnknownTopicOrPartition), RETRY),
        ("produce refused", refused(Code::TopicAuthorizationFailed), STOP),
        ("produce refused", refused(Code::InvalidTimestamp), STOP),
        // Never seen from a producer: stops, as it always did.
        ("produce refused", refused(Code::OffsetOutOfRange), STOP),
        (
            "fenced",
            PipelineError::Fenced {
                operation: "op".into(),
                fenced: Fenced { transactional_id: "p-1-0".into(), prefix: "p".into(), reason: "fenced".into() },
            },
            STOP,
        ),
        ("postgres transient", PipelineError::postgres("connect")(postgres_unreachable()), RETRY),
        ("postgres lasting", PipelineError::postgres("connect")(postgres_config_error()), STOP),
        (
            "row refused",
            PipelineError::RowRefused { table: "t".into(), task: "in[0]".into(), reason: "not null".into() },
            STOP,
        ),
        ("refused", PipelineError::Refused("source topic `in` does not exist".into()), STOP),
        ("state at risk", PipelineError::StateAtRisk("retention.ms".into()), STOP),
        ("savepoint", PipelineError::Savepoint("cannot read".into()), STOP),
        ("inconsistent", PipelineError::Inconsistent("offsets disagree".into()), STOP),
        ("bug", PipelineError::Bug("a record no task owns".into()), BUG),
        ("assignment lost", PipelineError::AssignmentLost(2), HEALS),
        (
            "checkpoint timeout",
            PipelineError::CheckpointTimeout { id: CheckpointId(3), phase: "commit", elapsed: Duration::from_secs(9) },
            HEALS,
        ),
        // The runner's own state errors stop the pipeline; a quota breach too, a poisoned lock is a bug.
        ("state backend", StateError::Backend("cannot write meta".into()).into(), STOP),
        ("state corrupt", StateError::Corrupt("malformed committed offset".into()).into(), STOP),
        ("state quota", quota().into(), STOP),
        ("state pool memory", pool_memory().into(), STOP),
        ("state poisoned", StateError::Poisoned("overlays".into()).into(), BUG),
    ];
    for kind in operator_kinds() {
        let expected = expected_in_a_call(&kind);
        // An instance that cannot start will not start on a retry, unless the tenant's memory
        // its other pipelines share was short; a stop is a stop anywhere.
        let shared = matches!(kind, ErrorKind::PoolMemory { .. } | ErrorKind::State(StateError::PoolMemory(_)));
        let at_init = if expected == RETRY && !shared { STOP } else { expected };
        rows.push(("operator init", operator(Call::Init, clone_kind(&kind)), at_init));
        for call in [Call::Process, Call::Snapshot, Call::Restore, Call::OnTimer] {
            rows.push(("operator call", operator(call, clone_kind(&kind)), expected));
        }
    }
    rows
}

/// A copy of `kind` (the type is not `Clone`: a trap code is).
fn clone_kind(kind: &ErrorKind) -> ErrorKind {
    operator_kinds()
        .into_iter()
        .find(|candidate| candidate.to_string() == kind.to_string())
        .expect("a kind of operator_kinds")
}

#[test]
fn every_error_kind_has_its_disposition() {
    let mut wrong = Vec::new();
    for (what, error, expected) in table() {
        let got = disposition(&error);
        if got != expected {
            wrong.push(format!("{what}: {error} -> {got:?}, expected {expected:?}"));
        }
        assert_eq!(error.disposition(), got, "the method is the function");
        assert_eq!(error.is_stop(), got == STOPPED, "{error}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The table names every variant: a new one must be added to it (and to [`disposition`]).
#[test]
fn the_table_covers_every_variant() {
    fn variant(error: &PipelineError) -> &'static str {
        match error {
            PipelineError::Config(_) => "Config",
            PipelineError::Load(_) => "Load",
            PipelineError::Operator(_) => "Operator",
            PipelineError::State(_) => "State",
            PipelineError::Kafka { .. } => "Kafka",
            PipelineError::ClusterRefused { .. } => "ClusterRefused",
            PipelineError::ProduceRefused { .. } => "ProduceRefused",
            PipelineError::Fenced { .. } => "Fenced",
            PipelineError::Postgres { .. } => "Postgres",
            PipelineError::RowRefused { .. } => "RowRefused",
            PipelineError::Refused(_) => "Refused",
            PipelineError::StateAtRisk(_) => "StateAtRisk",
            PipelineError::Savepoint(_) => "Savepoint",
            PipelineError::Inconsistent(_) => "Inconsistent",
            PipelineError::Bug(_) => "Bug",
            PipelineError::AssignmentLost(_) => "AssignmentLost",
            PipelineError::CheckpointTimeout { .. } => "CheckpointTimeout",
        }
    }
    fn state_kind(error: &StateError) -> &'static str {
        match error {
            StateError::Backend(_) => "Backend",
            StateError::Corrupt(_) => "Corrupt",
            StateError::QuotaExceeded { .. } => "QuotaExceeded",
            StateError::PoolMemory(_) => "PoolMemory",
            StateError::Poisoned(_) => "Poisoned",
        }
    }
    let table = table();
    let variants: BTreeSet<_> = table.iter().map(|(_, error, _)| variant(error)).collect();
    assert_eq!(variants.len(), 17, "{variants:?}");
    let classes: BTreeSet<String> = table
        .iter()
        .filter_map(|(_, error, _)| match error {
            PipelineError::Kafka { source, .. } => Some(format!("{:?}", classify(source))),
            _ => None,
        })
        .collect();
    assert_eq!(classes.len(), 8, "every ErrorClass: {classes:?}");
    let states: BTreeSet<_> = table
        .iter()
        .filter_map(|(_, error, _)| match error {
            PipelineError::State(error) => Some(state_kind(error)),
            PipelineError::Operator(OperatorError { kind: ErrorKind::State(error), .. }) => Some(state_kind(error)),
            _ => None,
        })
        .collect();
    assert_eq!(states.len(), 5, "{states:?}");
    assert_eq!(operator_kinds().len(), 20, "every ErrorKind once, the state kinds five times");
}

/// librdkafka's flags on a transactional call's error: a code that needs a human wins; a fatal
/// client is replaced by recovery; one to retry or to abort over heals as its code does.
#[test]
fn transaction_errors_go_by_their_flags_and_a_lasting_code() {
    let none = TransactionFlags::default();
    let retriable = TransactionFlags { retriable: true, ..none };
    let abort = TransactionFlags { requires_abort: true, ..none };
    let fatal = TransactionFlags { fatal: true, ..none };
    let rows = [
        (Code::OperationTimedOut, retriable, ErrorClass::Transient, HEALS),
        (Code::ConcurrentTransactions, retriable, ErrorClass::Transient, HEALS),
        (Code::State, none, ErrorClass::Transient, HEALS),
        (Code::NotEnoughReplicas, abort, ErrorClass::Transient, HEALS),
        (Code::InvalidTimestamp, abort, ErrorClass::RecordRefused, STOP),
        (Code::TopicAuthorizationFailed, abort, ErrorClass::Authorization, STOP),
        (Code::GroupAuthorizationFailed, abort, ErrorClass::Authorization, STOP),
        (Code::InvalidTransactionalState, fatal, ErrorClass::Fatal, HEALS),
        (Code::InvalidProducerIdMapping, fatal, ErrorClass::Fatal, HEALS),
        (Code::Fenced, fatal, ErrorClass::Fenced, HEALS),
        (Code::ProducerFenced, fatal, ErrorClass::Fenced, HEALS),
        (Code::TransactionalIdAuthorizationFailed, fatal, ErrorClass::Authorization, STOP),
        (Code::ClusterAuthorizationFailed, fatal, ErrorClass::Authorization, STOP),
        (Code::UnknownTopicOrPartition, retriable, ErrorClass::MissingTopic, RETRY),
    ];
    for (code, flags, class, expected) in rows {
        assert_eq!(classify_transaction(code, flags), class, "{code:?} {flags:?}");
        assert_eq!(of_class(class), expected, "{code:?} {flags:?}");
    }
}

/// The flags are read from rust-rdkafka's own error: a transactional producer with no broker
/// times out initialising (retriable), and refuses a transaction before that (no flag).
#[test]
#[allow(clippy::disallowed_methods)] // a producer of no pipeline: there are no [kafka] settings to apply
fn the_flags_come_from_librdkafka() {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", "127.0.0.1:1")
        .set("transactional.id", "weir-failure-test")
        .set("log_level", "0")
        .create()
        .expect("a producer");
    let error = producer.begin_transaction().expect_err("no transactions initialised");
    let KafkaError::Transaction(ref native) = error else { panic!("{error:?}") };
    assert_eq!(TransactionFlags::of(native), TransactionFlags::default(), "{error}");
    assert_eq!(native.code(), Code::State, "{error}");
    assert_eq!(disposition(&kafka(error)), HEALS);

    let error = producer.init_transactions(Duration::from_millis(200)).expect_err("no broker");
    let KafkaError::Transaction(ref native) = error else { panic!("{error:?}") };
    assert_eq!(TransactionFlags::of(native), TransactionFlags { retriable: true, ..Default::default() }, "{error}");
    assert_eq!(classify(&error), ErrorClass::Transient);
    assert_eq!(disposition(&kafka(error)), HEALS);
}

/// A quota breach names the setting and what to do, wherever it surfaces.
#[test]
fn a_quota_breach_says_what_to_do() {
    for error in [quota().into(), operator(Call::Process, ErrorKind::State(quota()))] {
        let message = error.to_string();
        for part in ["state quota exceeded", "state.max_bytes = 100", "the pipeline stops", "raise state.max_bytes"] {
            assert!(message.contains(part), "{part} in {message}");
        }
        assert_eq!(disposition(&error), STOP, "{message}");
    }
}

/// A broken invariant says it is a bug, not a refusal to start.
#[test]
fn a_bug_says_so() {
    for error in [PipelineError::Bug("a record no task owns".into()), StateError::Poisoned("overlays".into()).into()] {
        let message = error.to_string();
        assert!(message.starts_with("a bug in Weir: ") && message.ends_with("please report it"), "{message}");
        assert!(!message.contains("refusing to start"), "{message}");
    }
}

/// librdkafka's fatal and abortable transaction errors, as a (mock) transaction coordinator
/// makes them: `INVALID_TXN_STATE` finishes the producer, an unknown server error aborts the
/// transaction. Both heal by recovery.
#[test]
#[allow(clippy::disallowed_methods)] // clients of a mock cluster: there are no [kafka] settings to apply
fn a_coordinators_fatal_and_abortable_errors_carry_their_flags() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    use rdkafka::{Offset, TopicPartitionList};

    let mock = MockCluster::new(1).expect("a mock cluster");
    mock.create_topic("in", 1, 1).expect("a topic");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("group.id", "weir-failure-test")
        .create()
        .expect("a consumer");
    let group = consumer.group_metadata().expect("group metadata");
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("in", 0, Offset::Offset(1)).expect("an offset");
    let refused = |error: RDKafkaRespErr, id: &str| {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("transactional.id", id)
            .set("log_level", "0")
            .create()
            .expect("a producer");
        producer.init_transactions(Duration::from_secs(10)).expect("initialised");
        producer.begin_transaction().expect("a transaction");
        mock.request_errors(RDKafkaApiKey::AddOffsetsToTxn, &[error]);
        producer.send_offsets_to_transaction(&offsets, &group, Duration::from_secs(10)).expect_err("refused")
    };

    let error = refused(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN, "weir-failure-abortable");
    let KafkaError::Transaction(ref native) = error else { panic!("{error:?}") };
    assert!(TransactionFlags::of(native).requires_abort && !native.is_fatal(), "{error}");
    assert_eq!(classify(&error), ErrorClass::Transient, "{error}");
    assert_eq!(disposition(&kafka(error)), HEALS);

    let error = refused(RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE, "weir-failure-fatal");
    let KafkaError::Transaction(ref native) = error else { panic!("{error:?}") };
    assert!(TransactionFlags::of(native).fatal, "{error}");
    assert_eq!(classify(&error), ErrorClass::Fatal, "{error}");
    assert_eq!(disposition(&kafka(error)), HEALS);
}

/// A consumer polls on through what librdkafka retries itself, and through nothing else: not
/// a fatal error of the same code, a fenced static member, a vanished topic or a refusal.
#[test]
fn a_consumer_keeps_polling_through_transient_errors_only() {
    let table = [
        (KafkaError::MessageConsumption(Code::AllBrokersDown), true),
        (KafkaError::MessageConsumption(Code::BrokerTransportFailure), true),
        (KafkaError::MessageConsumption(Code::OperationTimedOut), true),
        (KafkaError::MessageConsumptionFatal(Code::AllBrokersDown), false),
        (KafkaError::MessageConsumptionFatal(Code::FencedInstanceId), false),
        (KafkaError::MessageConsumption(Code::UnknownTopicOrPartition), false),
        (KafkaError::MessageConsumption(Code::AutoOffsetReset), false),
        (KafkaError::MessageConsumption(Code::TopicAuthorizationFailed), false),
        (KafkaError::MessageConsumption(Code::InvalidProducerEpoch), false),
    ];
    let wrong: Vec<_> = table.iter().filter(|(error, expected)| keeps_polling(error) != *expected).collect();
    assert!(wrong.is_empty(), "keeps_polling answers wrongly for {wrong:?}");
}
