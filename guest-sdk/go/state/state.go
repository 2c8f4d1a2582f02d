// Package state is durable key-value state, scoped by the host to this operator and task.
//
// Reads see this task's own writes, including those of the current, not yet committed epoch.
// Writes become durable only when the epoch's checkpoint commits together with its output
// records; after a crash, or when a batch fails, they are rolled back with the output and the
// input is replayed. Keep every fact the transform must remember here (or in a Snapshotter),
// never only in memory.
//
// Keys and values are bytes; functions take string or []byte. GetJSON and PutJSON store values
// as compact JSON, the bytes the Rust SDK's state::put_json writes for the same data.
//
// Within one Process or OnTimer batch the SDK keeps the keys read and written in guest memory and
// passes the batch's writes to the host when it succeeds: a key costs one host call to read and
// one to write per batch, not per record.
//
// Natively (not GOOS=wasip1), the state is an in-memory map; see package weirtest.
package state

import (
	"encoding/json"
	"fmt"
	"strconv"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/internal/abi"
)

// Bytes is a key or value: a string (its UTF-8 bytes) or a byte slice.
type Bytes interface {
	~string | ~[]byte
}

// Entry is one (key, value) pair of ScanPrefix.
type Entry struct {
	Key   []byte
	Value []byte
}

// Get returns the value stored under key; ok is false when there is none.
func Get[K Bytes](key K) (value []byte, ok bool) {
	return abi.StateGet([]byte(key))
}

// Put stores value under key, replacing any previous value.
func Put[K, V Bytes](key K, value V) {
	abi.StatePut([]byte(key), []byte(value))
}

// Delete removes key; removing a missing key is not an error.
func Delete[K Bytes](key K) {
	abi.StateDelete([]byte(key))
}

// ScanPrefix returns up to limit entries whose key starts with prefix, in ascending byte order
// of key (the host caps limit at 10,000).
func ScanPrefix[K Bytes](prefix K, limit uint32) []Entry {
	raw := abi.StateScanPrefix([]byte(prefix), limit)
	entries := make([]Entry, len(raw))
	for i, e := range raw {
		entries[i] = Entry(e)
	}
	return entries
}

// GetJSON decodes the JSON value stored under key into v; found is false (and v untouched)
// when the key is absent. Fails when the stored bytes do not decode into v.
func GetJSON[K Bytes](key K, v any) (found bool, err error) {
	data, ok := Get(key)
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("state key %s: stored value is not the expected JSON: %v", strconv.Quote(string(key)), err)
	}
	return true, nil
}

// PutJSON stores v as compact JSON under key (see weir.MarshalJSON).
func PutJSON[K Bytes](key K, v any) error {
	data, err := weir.MarshalJSON(v)
	if err != nil {
		return fmt.Errorf("state key %s: cannot serialise value as JSON: %v", strconv.Quote(string(key)), err)
	}
	Put(key, data)
	return nil
}
