package abi

import (
	"bytes"
	"sort"
)

// callBytes is how many bytes of keys and values a call keeps before it hands its writes to the
// host and forgets what it read: a batch over many large values must not hold them all in guest
// memory.
const callBytes = 1 << 20

// The state reads and writes of the current process or on-timer call (see BeginCall); entries
// is nil between calls. An instance handles one call at a time, so this is not synchronised.
var call struct {
	entries map[string]*cached
	dirty   []string // keys written by the call and not yet passed to the host
	bytes   int      // bytes of keys and values that entered entries since it was last emptied
}

// cached is a key's value as the current call last read or wrote it.
type cached struct {
	value []byte
	ok    bool // false: absent, or deleted by the call
	dirty bool // in call.dirty
}

// BeginCall starts a process or on-timer call whose state reads and writes stay in the guest:
// a key crosses to the host at most once to be read and once to be written per call, rather
// than at every record that uses it. EndCall ends it.
func BeginCall() {
	call.entries, call.dirty, call.bytes = map[string]*cached{}, nil, 0
}

// EndCall ends the call BeginCall started, passing its writes to the host when it succeeded
// (in key order); a failed call drops those not passed on yet (before a scan, or past
// callBytes), and the host rolls back the rest.
func EndCall(succeeded bool) {
	if succeeded {
		flush()
	}
	call.entries, call.dirty = nil, nil
}

// StateGet returns the value under key; ok is false when there is none.
func StateGet(key []byte) ([]byte, bool) {
	if call.entries == nil {
		return hostGet(key)
	}
	e, hit := call.entries[string(key)]
	if !hit {
		value, ok := hostGet(key) // the caller's: keep copies it
		keep(key, value, ok, false)
		return value, ok
	}
	if !e.ok {
		return nil, false
	}
	return bytes.Clone(e.value), true
}

// StatePut stores value under key.
func StatePut(key, value []byte) {
	if call.entries == nil {
		hostPut(key, value)
		return
	}
	keep(key, value, true, true)
}

// StateDelete removes key.
func StateDelete(key []byte) {
	if call.entries == nil {
		hostDelete(key)
		return
	}
	keep(key, nil, false, true)
}

// StateScanPrefix returns up to limit entries whose key starts with prefix, in key order.
func StateScanPrefix(prefix []byte, limit uint32) []ScanEntry {
	// The host answers the scan: it must hold the call's writes so far.
	flush()
	return hostScanPrefix(prefix, limit)
}

// keep records a copy of value (ok false: absent or deleted) as key's value in the current
// call; dirty says the call wrote it. A key the call holds already keeps its entry and reuses
// its buffer: no one else holds it (StateGet hands out copies, and the host copies what flush
// passes), and most transforms read and write the same keys record after record.
func keep(key, value []byte, ok, dirty bool) {
	call.bytes += len(key) + len(value)
	e, hit := call.entries[string(key)]
	if !hit {
		e = &cached{}
		call.entries[string(key)] = e
	}
	if dirty && !e.dirty {
		call.dirty = append(call.dirty, string(key))
	}
	e.value = append(e.value[:0], value...)
	if ok && e.value == nil {
		e.value = []byte{} // present, if empty
	}
	e.ok, e.dirty = ok, e.dirty || dirty
	if call.bytes > callBytes {
		flush()
		call.entries, call.bytes = map[string]*cached{}, 0
	}
}

// flush passes the current call's unwritten writes to the host, in key order.
func flush() {
	sort.Strings(call.dirty)
	for _, key := range call.dirty {
		e := call.entries[key]
		if e.ok {
			hostPut([]byte(key), e.value)
		} else {
			hostDelete([]byte(key))
		}
		e.dirty = false
	}
	call.dirty = call.dirty[:0]
}
