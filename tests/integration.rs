//! Weir's integration tests, on a real broker (`scripts/kafka.sh`) with real components
//! (`scripts/build-plugins.sh`), one module per area, linked as one test binary: each binary is a
//! full link of RocksDB and wasmtime, so one per area cost minutes of every cold build. Run one
//! area with its module path, e.g. `cargo test --release -p weir-tests --test integration hosting::`.
//! The chaos run stops and starts the broker, so it is a binary of its own
//! (`tests/chaos_flights.rs`) that nothing else runs beside.

mod changelog_state;
mod cli_tools;
mod event_time_windows;
mod guest_failures;
mod hosting;
mod kafka_transactions;
mod observability;
mod pipeline_exactly_once;
mod pipeline_kafka_faults;
mod poison_records;
mod polyglot;
mod postgres_sink;
mod recovery_evidence;
mod release;
mod scale_out;
mod secured_kafka;
mod source_positions;
mod table_join;
mod transform_cli;
mod transform_projects;
mod wasm_plugins;
mod wasm_sandbox;
