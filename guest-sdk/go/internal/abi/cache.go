package abi

import (
	"bytes"
	"sort"
)

// The state reads and writes of the current process or on-timer call (see BeginCall); nil
// between calls.
var call map[string]*cached

// cached is a key's value as the current call last read or wrote it.
type cached struct {
	value []byte
	ok    bool // false: absent, or deleted by the call
	dirty bool // written by the call and not yet passed to the host
}

// BeginCall starts a process or on-timer call whose state reads and writes stay in the guest:
// a key crosses to the host at most once to be read and once to be written per call, rather
// than at every record that uses it. EndCall ends it.
func BeginCall() { call = map[string]*cached{} }

// EndCall ends the call BeginCall started, passing its writes to the host when it succeeded
// (in key order); a failed call drops them, as the host rolls them back.
func EndCall(succeeded bool) {
	if succeeded {
		flush()
	}
	call = nil
}

// StateGet returns the value under key; ok is false when there is none.
func StateGet(key []byte) ([]byte, bool) {
	if call == nil {
		return hostGet(key)
	}
	e, hit := call[string(key)]
	if !hit {
		value, ok := hostGet(key)
		e = &cached{value: value, ok: ok}
		call[string(key)] = e
	}
	return bytes.Clone(e.value), e.ok
}

// StatePut stores value under key.
func StatePut(key, value []byte) {
	if call == nil {
		hostPut(key, value)
		return
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	call[string(key)] = &cached{value: v, ok: true, dirty: true}
}

// StateDelete removes key.
func StateDelete(key []byte) {
	if call == nil {
		hostDelete(key)
		return
	}
	call[string(key)] = &cached{dirty: true}
}

// StateScanPrefix returns up to limit entries whose key starts with prefix, in key order.
func StateScanPrefix(prefix []byte, limit uint32) []ScanEntry {
	// The host answers the scan: it must hold the call's writes so far.
	flush()
	return hostScanPrefix(prefix, limit)
}

// flush passes the current call's unwritten writes to the host.
func flush() {
	var keys []string
	for key, e := range call {
		if e.dirty {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		e := call[key]
		if e.ok {
			hostPut([]byte(key), e.value)
		} else {
			hostDelete([]byte(key))
		}
		e.dirty = false
	}
}
