// sandbox-js: the JavaScript runtime's view of the sandbox, for tests/wasm_sandbox.rs.
//
// Answers the same words as the Rust `misbehave` guest, one output per record (value only):
// `open-file` and `connect` try the only I/O the runtime has, `fetch` (of file:///etc/passwd and
// of http://127.0.0.1:9092/; componentize-js has no file or socket API besides it), and `env`
// counts the environment variables the runtime exposes. Replies are `<word>: ok`,
// `<word>: err: <error>` or `env: <count>`. `raise` reads a property of null (a TypeError, not a
// TransformError), for the error reports of tests/polyglot.rs. Anything else is forwarded
// unchanged.
//
// Built without componentize-js's `http` feature (the host grants no wasi:http), `fetch` traps
// (`unreachable`) instead of throwing, so `open-file` and `connect` fail the call.
import { Output, Transform, exportTransform } from '../../../guest-sdk/js/src/index.js';

// process() is synchronous, so a fetch that started cannot be awaited: anything but an
// immediate refusal counts as access.
function attempt(word, url) {
  try {
    if (typeof fetch !== 'function') return `${word}: err: no fetch in this runtime`;
    const pending = fetch(url);
    let failure = null;
    pending.then(() => {}, (e) => { failure = e; });
    return failure ? `${word}: err: ${failure}` : `${word}: ok (request started)`;
  } catch (e) {
    return `${word}: err: ${e}`;
  }
}

function envCount() {
  const env = globalThis.process?.env;
  return env ? Object.keys(env).length : 0;
}

class Sandbox extends Transform {
  process(record, emit) {
    const word = record.value ? new TextDecoder().decode(record.value) : null;
    const reply = {
      'open-file': () => attempt(word, 'file:///etc/passwd'),
      connect: () => attempt(word, 'http://127.0.0.1:9092/'),
      env: () => `env: ${envCount()}`,
      raise: () => record.key.length,
    }[word];
    emit(new Output(record.key, reply ? reply() : record.value));
  }
}

export const { init, process, snapshot, restore, onTimer } = exportTransform(Sandbox);
