//go:build wasip1

package abi

// The canonical ABI of the weir:transform@0.2.0 world, written out by hand for the standard Go
// toolchain (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared). wit-bindgen-go's output assumes
// TinyGo's 32-bit memory layout (a Go string there is 8 bytes, as in the canonical ABI; in
// standard Go it is 16) and uses parameter types that //go:wasmexport rejects, so it does not
// build with standard Go.
//
// Memory layouts (canonical ABI, sizes and offsets in bytes):
//
//	option<list<u8>>   12, align 4: discriminant u8 @0, ptr @4, len @8
//	option<s64>        16, align 8: discriminant u8 @0, value @8
//	header             20, align 4: key (ptr, len) @0, value option<list<u8>> @8
//	input-record       88, align 8: key @0, value @12, headers (ptr, len) @24, timestamp s64 @32,
//	                                topic (ptr, len) @40, partition s32 @48, offset s64 @56,
//	                                event-time s64 @64, watermark option<s64> @72
//	output-record      64, align 8: key @0, value @12, headers @24, timestamp option<s64> @32
//	                                (disc @32, value @40), output option<string> @48 (disc @48,
//	                                ptr @52, len @56)
//	timer              24, align 8: key (ptr, len) @0, time s64 @8, domain u8 @16
//	transform-error    24, align 8: message (ptr, len) @0, offset option<s64> @8 (disc @8, @16)
//	result<list<output-record>, transform-error>
//	                   32, align 8: disc @0 (0 ok, 1 err), payload @8
//	result<_, string>  12, align 4: disc @0, string (ptr, len) @4
//
// Every export returns one i32: the address of its result in memory (a core function returns
// at most one value; anything larger goes through memory).
//
// Memory ownership: the host writes arguments, and results of state imports, into the host
// pool (see hostPool below); Go copies them out. Results of exports are Go allocations kept in
// `retained` until the host calls the export's cabi_post_* function.

import (
	"bytes"
	"errors"
	"unsafe"
)

// retained keeps the memory of the last export's result alive until its post-return call.
var retained []any

// Return areas of the imports: globals, so they never move.
var (
	getRet       [3]uint32
	scanRet      [2]uint32
	watermarkRet [2]int64 // option<s64>: discriminant in the low byte of [0], value [1]
)

// emptyPtr is the address given for empty lists: any non-zero address aligned to 8.
const emptyPtr = 8

// ptrAt turns a linear-memory address into a pointer (Go on wasm addresses memory from 0).
func ptrAt(addr uint32) unsafe.Pointer { return unsafe.Add(nil, uintptr(addr)) }

func addrOf(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }

func load8(addr uint32) uint8   { return *(*uint8)(ptrAt(addr)) }
func load32(addr uint32) uint32 { return *(*uint32)(ptrAt(addr)) }
func load64(addr uint32) int64  { return *(*int64)(ptrAt(addr)) }

func store8(addr uint32, v uint8)   { *(*uint8)(ptrAt(addr)) = v }
func store32(addr uint32, v uint32) { *(*uint32)(ptrAt(addr)) = v }
func store64(addr uint32, v int64)  { *(*int64)(ptrAt(addr)) = v }

// Memory the host writes into: the canonical ABI's cabi_realloc.
//
// The host calls cabi_realloc to place export arguments and import results in guest memory,
// and it forbids the guest to call any import while doing so. A Go function cannot promise
// that: any heap allocation may make the Go runtime read the clock through WASI (and a
// //go:wasmexport function cannot be entered at all while the runtime is initialising). So
// cabi_realloc is not Go code: cmd/weir-patch-core adds a small bump allocator to the core
// module that hands out memory from hostPool, a Go-owned buffer described by the header below
// (found in the data section by its marker). Go code copies everything the host wrote out of
// the pool and resets it before each export returns and after each import call, growing it
// when a call came close to filling it.
//
// The WASI adapter needs memory of its own the same way (its first allocation happens inside
// the Go runtime's own start-up; memory.grow is not an option because the Go runtime assumes
// that it alone grows linear memory): adapterArena, handed out by a second added function,
// cabi_realloc_adapter.

// poolHeader is read and written by the added cabi_realloc; keep the layout in sync with
// cmd/weir-patch-core: marker at 0, next at 24, end at 28, failed at 32.
type poolHeader struct {
	marker [24]byte
	next   uint32 // first free byte
	end    uint32 // end of the pool
	failed uint32 // size of a request that did not fit (cabi_realloc then traps)
}

var hostPool = poolHeader{marker: [24]byte{
	'w', 'e', 'i', 'r', '-', 'h', 'o', 's', 't', '-', 'p', 'o', 'o', 'l', '-', '-', '-', '-', 0xa5, 0x5a, 0xc3, 0x3c, 0x96, 0x69,
}}

// adapterArena is the WASI adapter's memory (its state and one 64 KiB stack page).
var adapterArena = [256 << 10]byte{
	'w', 'e', 'i', 'r', '-', 'a', 'd', 'a', 'p', 't', 'e', 'r', '-', 'a', 'r', 'e', 'n', 'a', 0xa5, 0x5a, 0xc3, 0x3c, 0x96, 0x69,
}

const (
	minPool = 4 << 20 // bytes
	maxPool = 1 << 30
)

var (
	poolBuf  []uint64 // backing store of hostPool
	poolBase uint32
	poolPeak uint32 // most bytes the host wrote in one call
)

// arenaRef keeps adapterArena linked in (the linker drops globals that no code refers to).
var arenaRef *[256 << 10]byte

func init() {
	arenaRef = &adapterArena
	resetPool()
}

// resetPool forgets everything in the pool (all of it must have been copied out) and makes
// sure that it holds at least twice the most the host ever wrote in one call.
func resetPool() {
	if used := hostPool.next - poolBase; poolBuf != nil && used > poolPeak {
		poolPeak = used
	}
	want := uint64(max(minPool, 2*uint64(poolPeak)))
	if uint64(len(poolBuf))*8 < want {
		want = min(want, maxPool)
		poolBuf = make([]uint64, want/8)
		poolBase = addrOf(unsafe.Pointer(&poolBuf[0]))
		hostPool.end = poolBase + uint32(len(poolBuf))*8
	}
	hostPool.next = poolBase
}

// copyBytes copies n bytes at addr out of the pool; a non-nil empty slice for n == 0.
func copyBytes(addr, n uint32) []byte {
	if n == 0 {
		return []byte{}
	}
	return bytes.Clone(unsafe.Slice((*byte)(ptrAt(addr)), n))
}

func copyString(addr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(ptrAt(addr)), n))
}

// liftOptBytes reads an option<list<u8>> at addr: nil for none.
func liftOptBytes(addr uint32) []byte {
	if load8(addr) == 0 {
		return nil
	}
	return copyBytes(load32(addr+4), load32(addr+8))
}

func liftHeaders(addr, n uint32) []Header {
	if n == 0 {
		return nil
	}
	headers := make([]Header, n)
	for i := range headers {
		base := addr + uint32(i)*20
		headers[i] = Header{
			Key:   copyString(load32(base), load32(base+4)),
			Value: liftOptBytes(base + 8),
		}
	}
	return headers
}

// liftOptInt64 reads an option<s64> at addr: nil for none.
func liftOptInt64(addr uint32) *int64 {
	if load8(addr) == 0 {
		return nil
	}
	v := load64(addr + 8)
	return &v
}

// lowerer builds an export's result in Go memory and remembers what must stay alive.
type lowerer struct{ keep []any }

func (l *lowerer) alloc(size uint32) uint32 {
	if size == 0 {
		return emptyPtr
	}
	buf := make([]uint64, (size+7)/8)
	l.keep = append(l.keep, buf)
	return addrOf(unsafe.Pointer(&buf[0]))
}

func (l *lowerer) bytes(b []byte) (uint32, uint32) {
	if len(b) == 0 {
		return emptyPtr, 0
	}
	l.keep = append(l.keep, b)
	return addrOf(unsafe.Pointer(unsafe.SliceData(b))), uint32(len(b))
}

func (l *lowerer) string(s string) (uint32, uint32) {
	if len(s) == 0 {
		return emptyPtr, 0
	}
	l.keep = append(l.keep, s)
	return addrOf(unsafe.Pointer(unsafe.StringData(s))), uint32(len(s))
}

func (l *lowerer) optBytes(addr uint32, b []byte) {
	if b == nil {
		return // zeroed memory: discriminant 0 (none)
	}
	store8(addr, 1)
	p, n := l.bytes(b)
	store32(addr+4, p)
	store32(addr+8, n)
}

func (l *lowerer) headers(hs []Header) (uint32, uint32) {
	if len(hs) == 0 {
		return emptyPtr, 0
	}
	arr := l.alloc(uint32(len(hs)) * 20)
	for i, h := range hs {
		base := arr + uint32(i)*20
		kp, kn := l.string(h.Key)
		store32(base, kp)
		store32(base+4, kn)
		l.optBytes(base+8, h.Value)
	}
	return arr, uint32(len(hs))
}

// unitResult lowers a result<_, string>.
func (l *lowerer) unitResult(err error) uint32 {
	ret := l.alloc(12)
	if err != nil {
		store8(ret, 1)
		p, n := l.string(err.Error())
		store32(ret+4, p)
		store32(ret+8, n)
	}
	return ret
}

func (l *lowerer) finish(ret uint32) uint32 {
	retained = l.keep
	return ret
}

var errNoTransform = errors.New("no transform is exported: call weir.Export in an init function of package main")

//go:wasmexport init
func exportInit(ptr, n uint32) uint32 {
	retained = nil
	config := make([][2]string, n)
	for i := range config {
		base := ptr + uint32(i)*16
		config[i] = [2]string{
			copyString(load32(base), load32(base+4)),
			copyString(load32(base+8), load32(base+12)),
		}
	}
	resetPool()
	err := errNoTransform
	if Exports.Init != nil {
		err = Exports.Init(config)
	}
	var l lowerer
	return l.finish(l.unitResult(err))
}

//go:wasmexport cabi_post_init
func postInit(uint32) { retained = nil }

//go:wasmexport process
func exportProcess(ptr, n uint32) uint32 {
	retained = nil
	batch := make([]InputRecord, n)
	for i := range batch {
		base := ptr + uint32(i)*88
		batch[i] = InputRecord{
			Key:       liftOptBytes(base),
			Value:     liftOptBytes(base + 12),
			Headers:   liftHeaders(load32(base+24), load32(base+28)),
			Timestamp: load64(base + 32),
			Topic:     copyString(load32(base+40), load32(base+44)),
			Partition: int32(load32(base + 48)),
			Offset:    load64(base + 56),
			EventTime: load64(base + 64),
			Watermark: liftOptInt64(base + 72),
		}
	}
	resetPool()
	if Exports.Process == nil {
		return lowerOutputs(nil, &TransformError{Message: errNoTransform.Error()})
	}
	return lowerOutputs(Exports.Process(batch))
}

// lowerOutputs lowers a result<list<output-record>, transform-error>.
func lowerOutputs(outputs []OutputRecord, failure *TransformError) uint32 {
	var l lowerer
	ret := l.alloc(32)
	if failure != nil {
		store8(ret, 1)
		p, n := l.string(failure.Message)
		store32(ret+8, p)
		store32(ret+12, n)
		if failure.Offset != nil {
			store8(ret+16, 1)
			store64(ret+24, *failure.Offset)
		}
		return l.finish(ret)
	}
	arr := l.alloc(uint32(len(outputs)) * 64)
	for i := range outputs {
		o := &outputs[i]
		base := arr + uint32(i)*64
		l.optBytes(base, o.Key)
		l.optBytes(base+12, o.Value)
		hp, hn := l.headers(o.Headers)
		store32(base+24, hp)
		store32(base+28, hn)
		if o.Timestamp != nil {
			store8(base+32, 1)
			store64(base+40, *o.Timestamp)
		}
		if o.Output != nil {
			store8(base+48, 1)
			p, n := l.string(*o.Output)
			store32(base+52, p)
			store32(base+56, n)
		}
	}
	store32(ret+8, arr)
	store32(ret+12, uint32(len(outputs)))
	return l.finish(ret)
}

//go:wasmexport cabi_post_process
func postProcess(uint32) { retained = nil }

//go:wasmexport snapshot
func exportSnapshot() uint32 {
	retained = nil
	var snapshot []byte
	if Exports.Snapshot != nil {
		snapshot = Exports.Snapshot()
	}
	var l lowerer
	ret := l.alloc(8)
	p, n := l.bytes(snapshot)
	store32(ret, p)
	store32(ret+4, n)
	return l.finish(ret)
}

//go:wasmexport cabi_post_snapshot
func postSnapshot(uint32) { retained = nil }

//go:wasmexport restore
func exportRestore(ptr, n uint32) uint32 {
	retained = nil
	snapshot := copyBytes(ptr, n)
	resetPool()
	err := errNoTransform
	if Exports.Restore != nil {
		err = Exports.Restore(snapshot)
	}
	var l lowerer
	return l.finish(l.unitResult(err))
}

//go:wasmexport cabi_post_restore
func postRestore(uint32) { retained = nil }

//go:wasmexport on-timer
func exportOnTimer(ptr, n uint32) uint32 {
	retained = nil
	due := make([]Timer, n)
	for i := range due {
		base := ptr + uint32(i)*24
		due[i] = Timer{
			Key:    copyBytes(load32(base), load32(base+4)),
			Time:   load64(base + 8),
			Domain: TimeDomain(load8(base + 16)),
		}
	}
	resetPool()
	if Exports.OnTimer == nil {
		return lowerOutputs(nil, &TransformError{Message: errNoTransform.Error()})
	}
	return lowerOutputs(Exports.OnTimer(due))
}

//go:wasmexport cabi_post_on-timer
func postOnTimer(uint32) { retained = nil }

// --- imports -----------------------------------------------------------------------------

//go:wasmimport weir:transform/state@0.2.0 get
func wasmGet(keyPtr unsafe.Pointer, keyLen uint32, ret unsafe.Pointer)

//go:wasmimport weir:transform/state@0.2.0 put
func wasmPut(keyPtr unsafe.Pointer, keyLen uint32, valuePtr unsafe.Pointer, valueLen uint32)

//go:wasmimport weir:transform/state@0.2.0 delete
func wasmDelete(keyPtr unsafe.Pointer, keyLen uint32)

//go:wasmimport weir:transform/state@0.2.0 scan-prefix
func wasmScanPrefix(prefixPtr unsafe.Pointer, prefixLen uint32, limit uint32, ret unsafe.Pointer)

//go:wasmimport weir:transform/log@0.2.0 log
func wasmLog(level uint32, msgPtr unsafe.Pointer, msgLen uint32)

//go:wasmimport weir:transform/timers@0.2.0 register
func wasmRegister(keyPtr unsafe.Pointer, keyLen uint32, time int64, domain uint32)

//go:wasmimport weir:transform/timers@0.2.0 cancel
func wasmCancel(keyPtr unsafe.Pointer, keyLen uint32, time int64, domain uint32)

//go:wasmimport weir:transform/timers@0.2.0 watermark
func wasmWatermark(ret unsafe.Pointer)

// hostGet returns the value under key; ok is false when there is none.
func hostGet(key []byte) (value []byte, ok bool) {
	getRet = [3]uint32{}
	wasmGet(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)), unsafe.Pointer(&getRet))
	if uint8(getRet[0]) == 0 {
		return nil, false
	}
	value = copyBytes(getRet[1], getRet[2])
	resetPool()
	return value, true
}

// hostPut stores value under key.
func hostPut(key, value []byte) {
	wasmPut(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)), unsafe.Pointer(unsafe.SliceData(value)), uint32(len(value)))
}

// hostDelete removes key.
func hostDelete(key []byte) {
	wasmDelete(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)))
}

// hostScanPrefix returns up to limit entries whose key starts with prefix, in key order.
func hostScanPrefix(prefix []byte, limit uint32) []ScanEntry {
	scanRet = [2]uint32{}
	wasmScanPrefix(unsafe.Pointer(unsafe.SliceData(prefix)), uint32(len(prefix)), limit, unsafe.Pointer(&scanRet))
	addr, n := scanRet[0], scanRet[1]
	entries := make([]ScanEntry, n)
	for i := range entries {
		base := addr + uint32(i)*16
		entries[i] = ScanEntry{
			Key:   copyBytes(load32(base), load32(base+4)),
			Value: copyBytes(load32(base+8), load32(base+12)),
		}
	}
	resetPool()
	return entries
}

// Log writes one line to the host's log.
func Log(level Level, message string) {
	wasmLog(uint32(level), unsafe.Pointer(unsafe.StringData(message)), uint32(len(message)))
}

// TimerRegister registers a timer for key at time on domain.
func TimerRegister(key []byte, time int64, domain TimeDomain) {
	wasmRegister(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)), time, uint32(domain))
}

// TimerCancel removes the timer for (key, time, domain).
func TimerCancel(key []byte, time int64, domain TimeDomain) {
	wasmCancel(unsafe.Pointer(unsafe.SliceData(key)), uint32(len(key)), time, uint32(domain))
}

// Watermark returns the task's watermark; ok is false while it has none.
func Watermark() (watermark int64, ok bool) {
	watermarkRet = [2]int64{}
	wasmWatermark(unsafe.Pointer(&watermarkRet))
	return watermarkRet[1], uint8(watermarkRet[0]) != 0
}
