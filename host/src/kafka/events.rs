//! Serving the main event queue of a client that has no poll loop of its own.
//!
//! rust-rdkafka sends librdkafka's log lines and error events to a client's main queue
//! (`log.queue`), served only by polling the client. An admin client's requests wait on their own
//! queues, so nothing serves its main queue: a refused SASL login or TLS handshake, which
//! librdkafka reports only there, would never reach [`LogContext`] (nor
//! [`super::recent_refusal`]) and a request would just time out "without a broker".

use std::ffi::CStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::bindings as rdsys;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

use super::repeats::LogContext;

/// How long one poll of the main queue waits: the longest delay before a log line or error is
/// seen, and before a dropped pump's thread ends.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// A thread that serves a client's main queue, handing its log lines and error events to the
/// client's [`LogContext`], until dropped. Drop it before the client.
pub struct EventPump {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The main queue of a client, as a pointer the pump's thread may own.
struct MainQueue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka's queues are thread safe; the pump's thread is the queue reference's only user.
unsafe impl Send for MainQueue {}

impl EventPump {
    /// Starts serving the main queue of `client` (a librdkafka handle that outlives the pump).
    pub fn start(client: *mut rdsys::rd_kafka_t, context: Arc<LogContext>) -> Self {
        // SAFETY: `client` is a live handle; the queue reference is released by the thread.
        let queue = MainQueue(unsafe { rdsys::rd_kafka_queue_get_main(client) });
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("kafka events".into())
            .spawn(move || {
                let queue = queue;
                while !stopped.load(Ordering::Acquire) {
                    // SAFETY: the queue reference is live until destroyed below; each event is
                    // destroyed after its strings were copied.
                    unsafe {
                        let event = rdsys::rd_kafka_queue_poll(queue.0, POLL_INTERVAL.as_millis() as i32);
                        if !event.is_null() {
                            dispatch(event, &context);
                            rdsys::rd_kafka_event_destroy(event);
                        }
                    }
                }
                // SAFETY: the thread's own reference, taken in `start`.
                unsafe { rdsys::rd_kafka_queue_destroy(queue.0) };
            })
            .expect("spawn the kafka events thread");
        Self { stop, thread: Some(thread) }
    }
}

/// Hands a log or error event to `context`; other events (none are expected on an admin
/// client's main queue) are dropped.
///
/// # Safety
/// `event` is a live event.
unsafe fn dispatch(event: *mut rdsys::rd_kafka_event_t, context: &LogContext) {
    let text = |ptr: *const std::os::raw::c_char| {
        if ptr.is_null() { String::new() } else { unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned() }
    };
    match unsafe { rdsys::rd_kafka_event_type(event) } {
        rdsys::RD_KAFKA_EVENT_LOG => {
            let (mut facility, mut line, mut level) = (std::ptr::null(), std::ptr::null(), 0);
            if unsafe { rdsys::rd_kafka_event_log(event, &mut facility, &mut line, &mut level) } == 0 {
                context.log(log_level(level), &text(facility), &text(line));
            }
        }
        rdsys::RD_KAFKA_EVENT_ERROR => {
            let code = unsafe { rdsys::rd_kafka_event_error(event) };
            let reason = text(unsafe { rdsys::rd_kafka_event_error_string(event) });
            context.error(KafkaError::Global(code.into()), &reason);
        }
        _ => {}
    }
}

/// librdkafka's syslog level as rust-rdkafka's (whose own conversion is private).
fn log_level(level: i32) -> RDKafkaLogLevel {
    match level {
        0 => RDKafkaLogLevel::Emerg,
        1 => RDKafkaLogLevel::Alert,
        2 => RDKafkaLogLevel::Critical,
        3 => RDKafkaLogLevel::Error,
        4 => RDKafkaLogLevel::Warning,
        5 => RDKafkaLogLevel::Notice,
        6 => RDKafkaLogLevel::Info,
        _ => RDKafkaLogLevel::Debug,
    }
}

impl Drop for EventPump {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
