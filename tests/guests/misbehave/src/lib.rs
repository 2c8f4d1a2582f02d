//! `misbehave`: a test-only transform that misbehaves on request, to test the host's sandbox,
//! limits and error handling.
//!
//! Every record first increments the state counter `count` (stored as a decimal ASCII
//! integer), then:
//!
//! | value (UTF-8) | behaviour |
//! |---|---|
//! | `loop` | loops forever (CPU deadline) |
//! | `sleep` | logs `misbehave: sleeping 30 s`, sleeps 30 s with `std::thread::sleep` (a WASI clock subscription and poll: a wait in the host), then forwards the record |
//! | `alloc` | allocates 1 MiB blocks forever, touching every page (memory limit) |
//! | `panic` | panics with `misbehave: panic at offset <offset>` (a trap) |
//! | `exit` | calls `std::process::exit(3)` (WASI `exit`) |
//! | `recurse` | unbounded recursion on the native wasm stack (stack overflow trap) |
//! | `invalid-output` | emits the record to the undefined sink output `no-such-output` |
//! | `error` | returns a transform-error `misbehave: error at offset <offset>` (offset filled in) |
//! | `error-huge` | returns a transform-error of about 1 MB (`misbehave: huge huge …`) |
//! | `open-file` | tries `std::fs::read("/etc/passwd")`, emits value `open-file: ok` or `open-file: err: <error>` |
//! | `connect` | tries a TCP connection to `127.0.0.1:9092` through `wasi:sockets`, emits `connect: ok` or `connect: err: <error>` |
//! | `env` | emits `env: <number of environment variables>` |
//! | `fill` | stores 64 KiB of state under the key `fill-<offset>` (state quota), then forwards the record |
//! | `store:<k>:<v>` | stores a value of `<v>` bytes under a key of `<k>` bytes (changelog record limit), emits `stored <k>:<v>` |
//! | `timer:<event\|processing>:<ms>` | registers a timer for the record's key on that clock at `<ms>`, emits `watermark: <the timers.watermark import's answer>` |
//! | `cancel:<event\|processing>:<ms>` | cancels that timer of the record's key, emits nothing |
//! | anything else | forwards the record unchanged |
//!
//! A word may also come as a JSON string (`"loop"`), as `weir produce` writes a `.jsonl` file.
//!
//! `on_timer` emits `fired <event|processing> <time> <key>` (key `fired`), and fails with a
//! transform error for a timer of key `fail`.
//!
//! Emitted replies keep the input key. Configuration: none (ignored).
//!
//! `connect` calls `wasi:sockets` (`tcp-create-socket`, `start-connect`, `finish-connect`)
//! directly instead of `std::net::TcpStream::connect`: Debian's wasi-libc has no socket
//! functions, so `std::net` does not link for wasm32-wasip2 with that toolchain. The host
//! sees the same calls std would make. `<error>` is then the WASI error code's name, e.g.
//! `access-denied`.

use std::hint::black_box;

use weir_guest::timers::{self, TimeDomain, Timer};
use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError, state};

/// The transform; it keeps nothing in memory.
pub struct Misbehave;

/// Recurses until the stack overflows; the array and `black_box` keep every frame alive, so the
/// optimiser can neither drop the recursion nor turn it into a loop.
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    // Called through an opaque function pointer so it can be neither inlined nor turned into a
    // loop, and with no address-taken locals, so its frames grow wasmtime's native wasm stack
    // (a stack-overflow trap) rather than the shadow stack in linear memory (which would run
    // into address 0 first and trap as an out-of-bounds access).
    let next: fn(u64) -> u64 = black_box(recurse);
    if depth == u64::MAX {
        return 0;
    }
    next(depth + 1).wrapping_add(depth)
}

/// Tries to open a TCP connection to 127.0.0.1:9092.
#[cfg(target_arch = "wasm32")]
fn connect() -> Result<(), String> {
    use wasi::sockets::instance_network::instance_network;
    use wasi::sockets::network::{ErrorCode, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
    use wasi::sockets::tcp_create_socket::create_tcp_socket;

    let network = instance_network();
    let socket = create_tcp_socket(IpAddressFamily::Ipv4).map_err(|e| e.name().to_string())?;
    let address = IpSocketAddress::Ipv4(Ipv4SocketAddress { port: 9092, address: (127, 0, 0, 1) });
    socket.start_connect(&network, address).map_err(|e| e.name().to_string())?;
    loop {
        match socket.finish_connect() {
            Ok(_streams) => return Ok(()),
            Err(ErrorCode::WouldBlock) => socket.subscribe().block(),
            Err(e) => return Err(e.name().to_string()),
        }
    }
}

/// Tries to open a TCP connection to 127.0.0.1:9092 (native builds).
#[cfg(not(target_arch = "wasm32"))]
fn connect() -> Result<(), String> {
    std::net::TcpStream::connect("127.0.0.1:9092").map(drop).map_err(|e| e.to_string())
}

fn reply(record: &Record, text: String) -> Output {
    Output::new(record.key(), Some(text))
}

impl Transform for Misbehave {
    fn init(_config: &Config) -> Result<Self, String> {
        Ok(Misbehave)
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let count = state::get("count")
            .and_then(|v| String::from_utf8(v).ok()?.parse::<u64>().ok())
            .unwrap_or(0);
        state::put("count", (count + 1).to_string());

        let offset = record.offset();
        // The word bare or as a JSON string (a `.jsonl` file loaded with `weir produce`).
        match record.value_str().unwrap_or("").trim_matches('"') {
            "loop" => {
                let mut n = 0u64;
                loop {
                    n = black_box(n.wrapping_add(1));
                }
            }
            "sleep" => {
                weir_guest::log::info("misbehave: sleeping 30 s");
                std::thread::sleep(std::time::Duration::from_secs(30));
                out.forward(record);
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    let mut block = vec![0u8; 1 << 20];
                    block.iter_mut().step_by(4096).for_each(|b| *b = 1);
                    hoard.push(black_box(block));
                }
            }
            "panic" => panic!("misbehave: panic at offset {offset}"),
            "exit" => std::process::exit(3),
            "recurse" => {
                black_box(recurse(0));
            }
            "invalid-output" => {
                out.emit(Output::new(record.key(), record.value()).to_output("no-such-output"))
            }
            "error" => return Err(TransformError::new(format!("misbehave: error at offset {offset}"))),
            "error-huge" => return Err(TransformError::new(format!("misbehave: {}", "huge ".repeat(200_000)))),
            "open-file" => out.emit(reply(
                record,
                match std::fs::read("/etc/passwd") {
                    Ok(_) => "open-file: ok".to_string(),
                    Err(e) => format!("open-file: err: {e}"),
                },
            )),
            "connect" => out.emit(reply(
                record,
                match connect() {
                    Ok(_) => "connect: ok".to_string(),
                    Err(e) => format!("connect: err: {e}"),
                },
            )),
            "env" => out.emit(reply(record, format!("env: {}", std::env::vars().count()))),
            "fill" => {
                state::put(format!("fill-{offset}"), vec![0u8; 64 << 10]);
                out.forward(record);
            }
            word if word.starts_with("store:") => {
                let mut sizes = word.split(':').skip(1).map(|size| size.parse::<usize>().ok());
                let (Some(Some(key)), Some(Some(value))) = (sizes.next(), sizes.next()) else {
                    return Err(TransformError::new(format!("misbehave: bad store word {word}")));
                };
                state::put(vec![b'k'; key], vec![b's'; value]);
                out.emit(reply(record, format!("stored {key}:{value}")));
            }
            word if word.starts_with("timer:") || word.starts_with("cancel:") => {
                let mut parts = word.split(':');
                let (verb, clock, ms) = (parts.next(), parts.next(), parts.next().and_then(|m| m.parse::<i64>().ok()));
                let domain = match clock {
                    Some("event") => TimeDomain::EventTime,
                    Some("processing") => TimeDomain::ProcessingTime,
                    _ => return Err(TransformError::new(format!("misbehave: bad timer word {word}"))),
                };
                let ms = ms.ok_or_else(|| TransformError::new(format!("misbehave: bad timer word {word}")))?;
                let key = record.key().unwrap_or_default();
                if verb == Some("timer") {
                    timers::register(key, ms, domain);
                    out.emit(reply(record, format!("watermark: {:?}", timers::watermark())));
                } else {
                    timers::cancel(key, ms, domain);
                }
            }
            _ => out.forward(record),
        }
        Ok(())
    }

    fn on_timer(&mut self, timer: &Timer, out: &mut Emitter) -> Result<(), TransformError> {
        if timer.key == b"fail" {
            return Err(TransformError::new("misbehave: timer of key fail"));
        }
        let clock = if timer.domain == TimeDomain::EventTime { "event" } else { "processing" };
        let key = String::from_utf8_lossy(&timer.key);
        out.emit(Output::new(Some("fired"), Some(format!("fired {clock} {} {key}", timer.time))));
        Ok(())
    }
}

weir_guest::export!(Misbehave);
