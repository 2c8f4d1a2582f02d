//! `wrong-version`: a component built against `weir:transform@1.0.0` — the same world shape as
//! the real contract, another version. The host must refuse to load it. It imports `state` and
//! `log` at 1.0.0 (its `init` logs and its `process` reads state), so the wrong version shows in
//! its imports as well as in its type names.

wit_bindgen::generate!({
    inline: r#"
        package weir:transform@1.0.0;

        interface types {
            record header { key: string, value: list<u8> }
            record input-record {
                key: option<list<u8>>,
                value: option<list<u8>>,
                headers: list<header>,
                timestamp: s64,
                topic: string,
                partition: s32,
                offset: s64,
            }
            record output-record {
                key: option<list<u8>>,
                value: option<list<u8>>,
                headers: list<header>,
                timestamp: option<s64>,
                output: option<string>,
            }
            record transform-error { message: string, offset: option<s64> }
        }

        interface state {
            get: func(key: list<u8>) -> option<list<u8>>;
            put: func(key: list<u8>, value: list<u8>);
            delete: func(key: list<u8>);
            scan-prefix: func(prefix: list<u8>, limit: u32) -> list<tuple<list<u8>, list<u8>>>;
        }

        interface log {
            enum level { trace, debug, info, warn, error }
            log: func(level: level, message: string);
        }

        world transform {
            use types.{input-record, output-record, transform-error};
            import state;
            import log;
            export init: func(config: list<tuple<string, string>>) -> result<_, string>;
            export process: func(batch: list<input-record>) -> result<list<output-record>, transform-error>;
            export snapshot: func() -> list<u8>;
            export restore: func(snapshot: list<u8>) -> result<_, string>;
        }
    "#,
    world: "transform",
});

use weir::transform::{log, state};

struct WrongVersion;

impl Guest for WrongVersion {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        log::log(log::Level::Info, "wrong-version: init");
        Ok(())
    }

    fn process(batch: Vec<InputRecord>) -> Result<Vec<OutputRecord>, TransformError> {
        let _ = state::get(b"count");
        Ok(batch
            .into_iter()
            .map(|r| OutputRecord {
                key: r.key,
                value: r.value,
                headers: r.headers,
                timestamp: None,
                output: None,
            })
            .collect())
    }

    fn snapshot() -> Vec<u8> {
        Vec::new()
    }

    fn restore(_snapshot: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

export!(WrongVersion);
