// Command sandbox-go is the Go runtime's view of the sandbox, for tests/wasm_sandbox.rs.
//
// It answers the same words as the Rust misbehave guest, one output per record (value only):
// "open-file" tries to read /etc/passwd, "connect" a TCP connection to 127.0.0.1:9092, and
// "env" counts the environment variables; replies are "<word>: ok", "<word>: err: <error>" or
// "env: <count>". "raise" indexes past the end of a slice (a runtime panic) and "exit" calls
// os.Exit(3), for the error reports of tests/polyglot.rs. Anything else is forwarded unchanged.
package main

import (
	"fmt"
	"net"
	"os"

	weir "example.invalid/weir/guest-sdk/go"
)

type sandbox struct{}

func attempt(word string, err error) string {
	if err != nil {
		return fmt.Sprintf("%s: err: %v", word, err)
	}
	return word + ": ok"
}

func (sandbox) Process(r *weir.Record, emit *weir.Emitter) error {
	word, _ := r.ValueString()
	var reply string
	switch word {
	case "open-file":
		_, err := os.ReadFile("/etc/passwd")
		reply = attempt(word, err)
	case "connect":
		conn, err := net.Dial("tcp", "127.0.0.1:9092")
		if err == nil {
			conn.Close()
		}
		reply = attempt(word, err)
	case "env":
		reply = fmt.Sprintf("env: %d", len(os.Environ()))
	case "raise":
		reply = string(r.Key[len(r.Key)])
	case "exit":
		os.Exit(3)
	default:
		emit.Forward(r)
		return nil
	}
	emit.Emit(weir.NewOutput(r.Key, []byte(reply)))
	return nil
}

func main() {}

func init() {
	weir.Export(func(weir.Config) (weir.Transform, error) { return sandbox{}, nil })
}
