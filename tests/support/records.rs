//! Records with any bytes — header names that are not UTF-8, null header values, repeated
//! names — written and read through librdkafka's raw API, as clients other than rust-rdkafka's
//! typed one can write them.

use std::ffi::{CString, c_void};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::bindings as rdsys;
use rdkafka::message::{BorrowedMessage, Message, Timestamp};
use rdkafka::producer::{DefaultProducerContext, Producer, ThreadedProducer};

use crate::pipeline::{FromMessage, Reader};
use crate::{Isolation, bootstrap, create_topic};

/// A header: name and value as bytes; `None` is a Kafka null value.
pub type RawHeader = (Vec<u8>, Option<Vec<u8>>);

/// One record, bytes as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawRecord {
    /// Key; `None` for null.
    pub key: Option<Vec<u8>>,
    /// Value; `None` for null.
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<RawHeader>,
}

impl RawRecord {
    /// A record with value `value` and no key or headers.
    pub fn value(value: impl Into<Vec<u8>>) -> Self {
        Self { value: Some(value.into()), ..Self::default() }
    }
}

/// A record as read back, with its coordinates and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp as the broker reports it.
    pub timestamp: Timestamp,
    /// Key, value and headers.
    pub record: RawRecord,
}

/// Creates `topic` with one partition and writes `records` to partition 0, in order, with an
/// idempotent producer; `timestamp` applies to each (`None`: librdkafka's "now").
pub async fn produce_raw(topic: &str, records: &[RawRecord], timestamp: Option<i64>) {
    create_topic(topic, 1).await;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        // Above librdkafka's default, so that records too large for a sink (but within the
        // broker's topic default of 1048588) can be written to a source.
        .set("message.max.bytes", "1048000")
        .create()
        .expect("producer");
    let topic_name = CString::new(topic).expect("topic name");
    for record in records {
        let mem = |bytes: &Option<Vec<u8>>| rdsys::rd_kafka_vu_s__bindgen_ty_1 {
            mem: rdsys::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                ptr: bytes.as_ref().map_or(std::ptr::null_mut(), |b| b.as_ptr() as *mut c_void),
                size: bytes.as_ref().map_or(0, Vec::len),
            },
        };
        // SAFETY: a fresh list; every pointer passed to librdkafka stays alive during the call
        // (RD_KAFKA_MSG_F_COPY makes it copy key and value; header_add copies too), and the
        // list belongs to librdkafka once produceva succeeded.
        unsafe {
            let headers = rdsys::rd_kafka_headers_new(record.headers.len());
            for (name, value) in &record.headers {
                let (value_ptr, value_len) =
                    value.as_ref().map_or((std::ptr::null(), 0), |v| (v.as_ptr().cast::<c_void>(), v.len() as isize));
                let added = rdsys::rd_kafka_header_add(
                    headers,
                    name.as_ptr().cast(),
                    name.len() as isize,
                    value_ptr,
                    value_len,
                );
                assert_eq!(added, rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR, "header_add");
            }
            let vu = |vtype, u| rdsys::rd_kafka_vu_t { vtype, u };
            use rdsys::rd_kafka_vtype_t::*;
            let mut vus = vec![
                vu(RD_KAFKA_VTYPE_TOPIC, rdsys::rd_kafka_vu_s__bindgen_ty_1 { cstr: topic_name.as_ptr() }),
                vu(RD_KAFKA_VTYPE_PARTITION, rdsys::rd_kafka_vu_s__bindgen_ty_1 { i32_: 0 }),
                vu(RD_KAFKA_VTYPE_MSGFLAGS, rdsys::rd_kafka_vu_s__bindgen_ty_1 { i: rdsys::RD_KAFKA_MSG_F_COPY }),
                vu(RD_KAFKA_VTYPE_KEY, mem(&record.key)),
                vu(RD_KAFKA_VTYPE_VALUE, mem(&record.value)),
                vu(RD_KAFKA_VTYPE_HEADERS, rdsys::rd_kafka_vu_s__bindgen_ty_1 { headers }),
            ];
            if let Some(ms) = timestamp {
                vus.push(vu(RD_KAFKA_VTYPE_TIMESTAMP, rdsys::rd_kafka_vu_s__bindgen_ty_1 { i64_: ms }));
            }
            let error = rdsys::rd_kafka_produceva(producer.client().native_ptr(), vus.as_ptr(), vus.len());
            assert!(error.is_null(), "produceva refused the record");
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush input");
}

/// Reads partitions `0..partitions` of `topic` read_committed from the beginning until at least
/// `count` records arrived (or `timeout` passed), then whatever follows within 2 s.
pub fn read_raw(topic: &str, partitions: i32, count: usize, timeout: Duration) -> Vec<ReadRecord> {
    let mut reader = Reader::<ReadRecord>::of(&bootstrap(), topic, partitions, Isolation::ReadCommitted);
    reader.read_until(count, timeout);
    reader.drain(Duration::from_secs(2));
    reader.records
}

impl FromMessage for ReadRecord {
    fn from_message(message: &BorrowedMessage<'_>) -> Self {
        let headers =
            weir::record_headers(message).into_iter().map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec))).collect();
        ReadRecord {
            partition: message.partition(),
            offset: message.offset(),
            timestamp: message.timestamp(),
            record: RawRecord {
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec),
                headers,
            },
        }
    }
}

/// Runs `weir consume` of `topic` from the beginning for `max` records; its JSON lines.
pub fn weir_consume(topic: &str, max: usize) -> Vec<serde_json::Value> {
    let max = max.to_string();
    let brokers = bootstrap();
    let args = ["consume", "--topic", topic, "--from-beginning", "--max", max.as_str(), "--brokers", brokers.as_str()];
    let output = std::process::Command::new(crate::weir_binary()).args(args).output().expect("run weir consume");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "weir consume exited with {}: {stderr}", output.status);
    String::from_utf8(output.stdout)
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}
