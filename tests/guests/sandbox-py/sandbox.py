"""sandbox-py: the Python runtime's view of the sandbox, for tests/wasm_sandbox.rs.

Answers the same words as the Rust `misbehave` guest, one output per record (value only):
`open-file` tries to read /etc/passwd, `connect` a TCP connection to 127.0.0.1:9092, and
`env` counts the environment variables; replies are `<word>: ok`, `<word>: err: <error>` or
`env: <count>`. `raise` divides by zero (a ZeroDivisionError, not a TransformError) and `exit`
calls sys.exit(3), for the error reports of tests/polyglot.rs. Anything else is forwarded
unchanged.
"""

import os
import socket
import sys

from weir_guest import Output, Transform, export


def _attempt(word, action):
    try:
        action()
        return f"{word}: ok"
    except Exception as e:  # the point is to report whatever the runtime raises
        return f"{word}: err: {type(e).__name__}: {e}"


def _read_file():
    with open("/etc/passwd", "rb") as f:
        f.read()


def _connect():
    # A literal address: create_connection would fail earlier, on the idna codec lookup.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.connect(("127.0.0.1", 9092))


class Sandbox(Transform):
    def process(self, record, emit):
        word = record.value_str
        if word == "open-file":
            emit(Output(key=record.key, value=_attempt(word, _read_file)))
        elif word == "connect":
            emit(Output(key=record.key, value=_attempt(word, _connect)))
        elif word == "env":
            emit(Output(key=record.key, value=f"env: {len(os.environ)}"))
        elif word == "raise":
            emit(Output(key=record.key, value=str(1 / len(record.key or b""))))
        elif word == "exit":
            sys.exit(3)
        else:
            emit(Output(key=record.key, value=record.value))


WitWorld = export(Sandbox)
