//go:build !wasip1

package abi

// Native stand-ins for `go test`: state and timers are in memory, log lines go to stderr.

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

// hostGet returns the value under key; ok is false when there is none.
func hostGet(key []byte) ([]byte, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := memory[string(key)]
	return bytes.Clone(v), ok
}

// hostPut stores value under key.
func hostPut(key, value []byte) {
	mu.Lock()
	defer mu.Unlock()
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	memory[string(key)] = v
}

// hostDelete removes key.
func hostDelete(key []byte) {
	mu.Lock()
	defer mu.Unlock()
	delete(memory, string(key))
}

// hostScanPrefix returns up to limit entries whose key starts with prefix, in key order.
func hostScanPrefix(prefix []byte, limit uint32) []ScanEntry {
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

// timerID is one registered timer, comparable (the key as a string).
type timerID struct {
	domain TimeDomain
	time   int64
	key    string
}

var (
	timers       = map[timerID]struct{}{}
	watermark    int64
	hasWatermark bool
)

// TimerRegister registers a timer for key at time on domain.
func TimerRegister(key []byte, time int64, domain TimeDomain) {
	mu.Lock()
	defer mu.Unlock()
	timers[timerID{domain, time, string(key)}] = struct{}{}
}

// TimerCancel removes the timer for (key, time, domain).
func TimerCancel(key []byte, time int64, domain TimeDomain) {
	mu.Lock()
	defer mu.Unlock()
	delete(timers, timerID{domain, time, string(key)})
}

// Watermark returns the task's watermark; ok is false while it has none.
func Watermark() (int64, bool) {
	mu.Lock()
	defer mu.Unlock()
	return watermark, hasWatermark
}

// SetWatermark moves the watermark (tests); ok false removes it.
func SetWatermark(w int64, ok bool) {
	mu.Lock()
	defer mu.Unlock()
	watermark, hasWatermark = w, ok
}

// RegisteredTimers returns the registered timers in firing order: (domain, time, key).
func RegisteredTimers() []Timer {
	mu.Lock()
	defer mu.Unlock()
	all := make([]Timer, 0, len(timers))
	for id := range timers {
		all = append(all, Timer{Key: []byte(id.key), Time: id.time, Domain: id.domain})
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		if a.Time != b.Time {
			return a.Time < b.Time
		}
		return bytes.Compare(a.Key, b.Key) < 0
	})
	return all
}

// ResetTimers replaces the registered timers (nil: none).
func ResetTimers(registered []Timer) {
	mu.Lock()
	defer mu.Unlock()
	timers = map[timerID]struct{}{}
	for _, t := range registered {
		timers[timerID{t.Domain, t.Time, string(t.Key)}] = struct{}{}
	}
}
