//go:build !wasip1

package abi

import "testing"

func get(t *testing.T, key string) (string, bool) {
	t.Helper()
	v, ok := StateGet([]byte(key))
	if ok && v == nil {
		t.Fatalf("%s: present with a nil value", key)
	}
	if !ok && v != nil {
		t.Fatalf("%s: absent with value %q", key, v)
	}
	return string(v), ok
}

// A call reads its own writes through the cache, hands out copies, keeps none of the caller's
// buffers, and passes its writes to the host only when it succeeds.
func TestACallsStateCacheKeepsItsOwnCopies(t *testing.T) {
	memory = map[string][]byte{"a": []byte("1"), "d": []byte("4")}
	BeginCall()
	v, _ := StateGet([]byte("a"))
	v[0] = 'x'
	if got, ok := get(t, "a"); got != "1" || !ok {
		t.Errorf("a read back as %q %v after its reader changed its copy", got, ok)
	}
	buf := []byte("22")
	StatePut([]byte("a"), buf)
	buf[0] = '9'
	if got, _ := get(t, "a"); got != "22" {
		t.Errorf("a is %q after the writer reused its buffer", got)
	}
	StatePut([]byte("a"), []byte("3")) // shorter: the entry's buffer is reused
	StatePut([]byte("e"), []byte{})
	StateDelete([]byte("d"))
	for key, want := range map[string]struct {
		value string
		ok    bool
	}{"a": {"3", true}, "e": {"", true}, "d": {"", false}, "missing": {"", false}} {
		if got, ok := get(t, key); got != want.value || ok != want.ok {
			t.Errorf("%s: %q %v, want %q %v", key, got, ok, want.value, want.ok)
		}
	}
	if string(memory["a"]) != "1" || memory["d"] == nil {
		t.Error("the host saw writes before the call ended")
	}
	EndCall(true)
	if string(memory["a"]) != "3" || memory["e"] == nil || len(memory["e"]) != 0 || memory["d"] != nil {
		t.Errorf("after the call: %q", memory)
	}

	BeginCall()
	StatePut([]byte("a"), []byte("lost"))
	StatePut([]byte("f"), []byte("lost"))
	EndCall(false)
	if string(memory["a"]) != "3" || memory["f"] != nil {
		t.Errorf("a failed call's writes reached the host: %q", memory)
	}
}
