//! Headers of a consumed record, read through librdkafka's raw header API.
//!
//! rust-rdkafka's header accessors turn a header name into `&str` with an `unwrap`, so a record
//! whose header name is not UTF-8 (Kafka allows any bytes; any client can write them) panics the
//! reader. Here names and values stay bytes; callers decide how to show them.

use std::ffi::CStr;
use std::ptr;

use rdkafka::bindings as rdsys;
use rdkafka::message::BorrowedMessage;

/// One header of a consumed record, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawHeader<'a> {
    /// The name's bytes. librdkafka hands names on as C strings: a name holding a NUL byte
    /// arrives cut at it (no librdkafka API returns the rest).
    pub key: &'a [u8],
    /// The value's bytes; `None` for a Kafka null value (distinct from an empty one).
    pub value: Option<&'a [u8]>,
}

/// The headers of `message`, in the order the producer wrote them, repeated names included.
/// A message without headers gives an empty list.
pub fn record_headers<'a>(message: &'a BorrowedMessage<'_>) -> Vec<RawHeader<'a>> {
    let mut headers = ptr::null_mut();
    // SAFETY: `message.ptr()` is a live message; librdkafka parses the headers into a list it
    // owns together with the message, so they live as long as the borrow of `message`.
    let found = unsafe { rdsys::rd_kafka_message_headers(message.ptr(), &mut headers) };
    if found != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
        return Vec::new();
    }
    // SAFETY: `headers` is the message's valid header list.
    let count = unsafe { rdsys::rd_kafka_header_cnt(headers) };
    let mut list = Vec::with_capacity(count);
    for index in 0..count {
        let (mut name, mut value, mut size) = (ptr::null(), ptr::null(), 0);
        // SAFETY: `index < count`; the out-pointers point into the header list, which outlives
        // the borrow of `message` (see above).
        let error = unsafe { rdsys::rd_kafka_header_get_all(headers, index, &mut name, &mut value, &mut size) };
        if error != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            break;
        }
        // SAFETY: librdkafka NUL-terminates every name; `value` points at `size` bytes.
        let key = unsafe { CStr::from_ptr(name) }.to_bytes();
        let value = (!value.is_null()).then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) });
        list.push(RawHeader { key, value });
    }
    list
}
