//! Rust bindings of the `weir:transform` world, generated from `guest-sdk/wit`.

wasmtime::component::bindgen!({
    path: "../guest-sdk/wit",
    world: "transform",
    // Host functions may trap: a state backend failure or an exceeded deadline ends the call.
    imports: { default: trappable },
});
