//go:build !wasip1

package abi

// Native stand-ins for `go test`: state is an in-memory map, log lines go to stderr.

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"sync"
)

var (
	mu     sync.Mutex
	memory = map[string][]byte{}
)

var levelNames = [...]string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}

// StateGet returns the value under key; ok is false when there is none.
func StateGet(key []byte) ([]byte, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := memory[string(key)]
	return bytes.Clone(v), ok
}

// StatePut stores value under key.
func StatePut(key, value []byte) {
	mu.Lock()
	defer mu.Unlock()
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	memory[string(key)] = v
}

// StateDelete removes key.
func StateDelete(key []byte) {
	mu.Lock()
	defer mu.Unlock()
	delete(memory, string(key))
}

// StateScanPrefix returns up to limit entries whose key starts with prefix, in key order.
func StateScanPrefix(prefix []byte, limit uint32) []ScanEntry {
	mu.Lock()
	defer mu.Unlock()
	var keys []string
	for k := range memory {
		if bytes.HasPrefix([]byte(k), prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if uint32(len(keys)) > limit {
		keys = keys[:limit]
	}
	entries := make([]ScanEntry, len(keys))
	for i, k := range keys {
		entries[i] = ScanEntry{Key: []byte(k), Value: bytes.Clone(memory[k])}
	}
	return entries
}

// Log writes one line to stderr.
func Log(level Level, message string) {
	name := "?"
	if int(level) < len(levelNames) {
		name = levelNames[level]
	}
	fmt.Fprintf(os.Stderr, "[%s] %s\n", name, message)
}

// SnapshotState copies the in-memory state (for rolling back a failed batch in tests).
func SnapshotState() map[string][]byte {
	mu.Lock()
	defer mu.Unlock()
	c := make(map[string][]byte, len(memory))
	for k, v := range memory {
		c[k] = v
	}
	return c
}

// ResetState replaces the in-memory state (nil: empty).
func ResetState(m map[string][]byte) {
	mu.Lock()
	defer mu.Unlock()
	memory = map[string][]byte{}
	for k, v := range m {
		memory[k] = v
	}
}
