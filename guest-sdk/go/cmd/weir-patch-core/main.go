// Command weir-patch-core prepares a core module built with the Go SDK (GOOS=wasip1
// GOARCH=wasm -buildmode=c-shared) for `wasm-tools component new` with the WASI preview1
// reactor adapter:
//
//	go run ./cmd/weir-patch-core <in.wasm> <out.wasm>
//
// It appends two small allocator functions that are not Go code, and exports them:
//
//   - cabi_realloc, which the host calls to place export arguments and import results in
//     guest memory. The canonical ABI forbids the guest to call imports while it runs, and any
//     Go heap allocation may make the Go runtime read the clock through WASI (the host then
//     traps with "cannot leave component instance"). This one bump-allocates from the SDK's
//     host pool, a Go-owned buffer whose header (internal/abi.hostPool: marker, next, end,
//     failed) it finds in the data section by its marker. Go copies everything out of the pool
//     and resets it after each call.
//   - cabi_realloc_adapter, which wit-component gives the adapter for its state and stack. The
//     adapter allocates on its first use, inside the Go runtime's own start-up, where Go code
//     cannot be entered; and memory.grow is no option, since the Go runtime assumes that it
//     alone grows linear memory (runtime/mem_wasm.go). This one bump-allocates from
//     internal/abi.adapterArena, a static array also found by its marker, and never frees.
//
// Nothing else in the module changes.
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// Markers at the start of internal/abi.adapterArena and internal/abi.hostPool.
var (
	arenaMarker = []byte("weir-adapter-arena\xa5\x5a\xc3\x3c\x96\x69")
	poolMarker  = []byte("weir-host-pool----\xa5\x5a\xc3\x3c\x96\x69")
)

// arenaSize is len(internal/abi.adapterArena).
const arenaSize = 256 << 10

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: weir-patch-core <in.wasm> <out.wasm>")
		os.Exit(2)
	}
	in, err := os.ReadFile(os.Args[1])
	if err == nil {
		var out []byte
		var arena, pool uint32
		out, arena, pool, err = patch(in)
		if err == nil {
			err = os.WriteFile(os.Args[2], out, 0o644)
			fmt.Fprintf(os.Stderr, "weir-patch-core: added cabi_realloc (host pool header at %#x) and cabi_realloc_adapter (arena at %#x, %d KiB)\n", pool, arena, arenaSize>>10)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir-patch-core:", err)
		os.Exit(1)
	}
}

type section struct {
	id   byte
	body []byte
}

// reader is a cursor over a byte slice with LEB128 decoding.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) byte() byte {
	if r.pos >= len(r.b) {
		r.err = errors.New("unexpected end of section")
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) u32() uint32 {
	var v uint64
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return uint32(v)
		}
	}
	r.err = errors.New("bad LEB128")
	return 0
}

func (r *reader) s32() int32 {
	var v int64
	shift := 0
	for {
		c := r.byte()
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return int32(v)
		}
		if shift > 35 || r.err != nil {
			r.err = errors.New("bad LEB128")
			return 0
		}
	}
}

func (r *reader) bytes(n uint32) []byte {
	if r.pos+int(n) > len(r.b) {
		r.err = errors.New("unexpected end of section")
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

func (r *reader) name() string { return string(r.bytes(r.u32())) }

// skipLimits skips a table or memory limits field.
func (r *reader) skipLimits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

func uleb(v uint32) []byte { return binary.AppendUvarint(nil, uint64(v)) }

func sleb(v int32) []byte {
	var out []byte
	x := int64(v)
	for {
		c := byte(x & 0x7f)
		x >>= 7
		if (x == 0 && c&0x40 == 0) || (x == -1 && c&0x40 != 0) {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

// appendToVec returns a vector section body with one more entry.
func appendToVec(body, entry []byte) ([]byte, uint32, error) {
	r := &reader{b: body}
	n := r.u32()
	if r.err != nil {
		return nil, 0, r.err
	}
	out := append(uleb(n+1), body[r.pos:]...)
	return append(out, entry...), n, nil
}

// findMarker returns the address of the one place where marker starts in the active data
// segments.
func findMarker(data []byte, marker []byte) (uint32, error) {
	var addr uint32
	found := 0
	r := &reader{b: data}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		flags := r.u32()
		var offset int32
		switch flags {
		case 0, 2:
			if flags == 2 {
				r.u32()
			}
			if r.byte() != 0x41 { // i32.const
				return 0, errors.New("data segment offset is not an i32.const")
			}
			offset = r.s32()
			if r.byte() != 0x0b {
				return 0, errors.New("data segment offset is not a constant")
			}
		case 1:
		default:
			return 0, errors.New("unknown data segment kind")
		}
		seg := r.bytes(r.u32())
		if flags == 1 {
			continue
		}
		for i := 0; ; {
			j := bytes.Index(seg[i:], marker)
			if j < 0 {
				break
			}
			addr = uint32(offset) + uint32(i+j)
			found++
			i += j + 1
		}
	}
	if r.err != nil {
		return 0, fmt.Errorf("data section: %w", r.err)
	}
	if found != 1 {
		return 0, fmt.Errorf("found the marker %q %d times, expected once: is the module built with the Go SDK?", marker[:18], found)
	}
	return addr, nil
}

// i32const is the instruction i32.const v.
func i32const(v uint32) []byte { return append([]byte{0x41}, sleb(int32(v))...) }

// poolRealloc is the body of cabi_realloc(old_ptr, old_size, align, new_size): bump
// allocation from the host pool whose header is at h (next at h+24, end at h+28, failed at
// h+32); a reallocation copies the old bytes; traps when the pool is exhausted.
func poolRealloc(h uint32) []byte {
	hc := i32const(h)
	var f []byte
	f = append(f, 1, 1, 0x7f) // local 4: i32 $ptr
	f = append(f, hc...)
	f = append(f, 0x28, 2, 24)                                    // i32.load offset=24 (next)
	f = append(f, 0x20, 2, 0x6a, 0x41, 1, 0x6b)                   // + align - 1
	f = append(f, 0x41, 0, 0x20, 2, 0x6b, 0x71)                   // & -align
	f = append(f, 0x22, 4, 0x20, 3, 0x6a)                         // local.tee $ptr; + new_size
	f = append(f, hc...)                                          //
	f = append(f, 0x28, 2, 28, 0x4b)                              // > end (i32.load offset=28)
	f = append(f, 0x04, 0x40)                                     // if
	f = append(f, hc...)                                          //
	f = append(f, 0x20, 3, 0x36, 2, 32, 0x00, 0x0b)               //   failed = new_size; unreachable
	f = append(f, hc...)                                          // end
	f = append(f, 0x20, 4, 0x20, 3, 0x6a, 0x36, 2, 24)            // next = $ptr + new_size
	f = append(f, 0x20, 0, 0x04, 0x40)                            // if old_ptr
	f = append(f, 0x20, 4, 0x20, 0)                               //   memory.copy($ptr, old_ptr,
	f = append(f, 0x20, 1, 0x20, 3, 0x20, 1, 0x20, 3, 0x49, 0x1b) // min(old_size, new_size))
	f = append(f, 0xfc, 0x0a, 0, 0, 0x0b)                         // end
	f = append(f, 0x20, 4, 0x0b)                                  // $ptr
	return f
}

// arenaRealloc is the body of cabi_realloc_adapter: bump allocation from [base, end) with
// the bump pointer in global g; traps on a reallocation or when the arena is exhausted.
func arenaRealloc(g []byte, end uint32) []byte {
	var f []byte
	f = append(f, 1, 1, 0x7f)                      // local 4: i32 $ptr
	f = append(f, 0x20, 0, 0x04, 0x40, 0x00, 0x0b) // if old_ptr { unreachable }
	f = append(f, 0x23)
	f = append(f, g...)                         // global.get $bump
	f = append(f, 0x20, 2, 0x6a, 0x41, 1, 0x6b) // + align - 1
	f = append(f, 0x41, 0, 0x20, 2, 0x6b, 0x71) // & -align
	f = append(f, 0x22, 4, 0x20, 3, 0x6a, 0x24) // local.tee $ptr; + new_size; global.set
	f = append(f, g...)                         //   $bump
	f = append(f, 0x23)
	f = append(f, g...) // global.get $bump
	f = append(f, i32const(end)...)
	f = append(f, 0x4b, 0x04, 0x40, 0x00, 0x0b) // > end: unreachable
	f = append(f, 0x20, 4, 0x0b)                // $ptr
	return f
}

func patch(in []byte) (out []byte, arena, pool uint32, err error) {
	if len(in) < 8 || !bytes.Equal(in[:8], []byte("\x00asm\x01\x00\x00\x00")) {
		return nil, 0, 0, errors.New("not a core WebAssembly module")
	}
	var sections []section
	r := &reader{b: in, pos: 8}
	for r.pos < len(in) && r.err == nil {
		id := r.byte()
		body := r.bytes(r.u32())
		sections = append(sections, section{id, body})
	}
	if r.err != nil {
		return nil, 0, 0, r.err
	}
	find := func(id byte) *section {
		for i := range sections {
			if sections[i].id == id {
				return &sections[i]
			}
		}
		return nil
	}
	types, imports, funcs, globals, exports, code, data :=
		find(1), find(2), find(3), find(6), find(7), find(10), find(11)
	if types == nil || funcs == nil || globals == nil || exports == nil || code == nil || data == nil {
		return nil, 0, 0, errors.New("module lacks a type, function, global, export, code or data section")
	}

	// Imported functions and globals come first in their index spaces.
	var importedFuncs, importedGlobals uint32
	if imports != nil {
		r := &reader{b: imports.body}
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.name()
			r.name()
			switch r.byte() {
			case 0: // func
				r.u32()
				importedFuncs++
			case 1: // table
				r.byte()
				r.skipLimits()
			case 2: // memory
				r.skipLimits()
			case 3: // global
				r.byte()
				r.byte()
				importedGlobals++
			case 4: // tag
				r.byte()
				r.u32()
			default:
				return nil, 0, 0, errors.New("unknown import kind")
			}
		}
		if r.err != nil {
			return nil, 0, 0, fmt.Errorf("import section: %w", r.err)
		}
	}

	// The exports must be the SDK's, and not patched already.
	{
		r := &reader{b: exports.body}
		seen := map[string]bool{}
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			seen[r.name()] = true
			r.byte()
			r.u32()
		}
		for _, name := range []string{"cabi_realloc", "cabi_realloc_adapter"} {
			if seen[name] {
				return nil, 0, 0, fmt.Errorf("module already exports %s (patched twice?)", name)
			}
		}
		for _, want := range []string{"_initialize", "memory", "init", "process"} {
			if !seen[want] {
				return nil, 0, 0, fmt.Errorf("module does not export %s: build it with the Go SDK, GOOS=wasip1 GOARCH=wasm -buildmode=c-shared", want)
			}
		}
	}

	if arena, err = findMarker(data.body, arenaMarker); err != nil {
		return nil, 0, 0, err
	}
	if pool, err = findMarker(data.body, poolMarker); err != nil {
		return nil, 0, 0, err
	}
	arenaStart := (arena + 15) &^ 15
	arenaEnd := arena + arenaSize

	// (func (param i32 i32 i32 i32) (result i32))
	typeEntry := []byte{0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f}
	var typeIndex, funcCount, globalCount uint32
	if types.body, typeIndex, err = appendToVec(types.body, typeEntry); err != nil {
		return nil, 0, 0, err
	}
	if funcs.body, funcCount, err = appendToVec(funcs.body, uleb(typeIndex)); err != nil {
		return nil, 0, 0, err
	}
	if funcs.body, _, err = appendToVec(funcs.body, uleb(typeIndex)); err != nil {
		return nil, 0, 0, err
	}
	poolFunc := importedFuncs + funcCount
	arenaFunc := poolFunc + 1
	// (global $bump (mut i32) (i32.const arenaStart))
	globalEntry := append(append([]byte{0x7f, 0x01}, i32const(arenaStart)...), 0x0b)
	if globals.body, globalCount, err = appendToVec(globals.body, globalEntry); err != nil {
		return nil, 0, 0, err
	}
	bump := uleb(importedGlobals + globalCount)

	for _, body := range [][]byte{poolRealloc(pool), arenaRealloc(bump, arenaEnd)} {
		if code.body, _, err = appendToVec(code.body, append(uleb(uint32(len(body))), body...)); err != nil {
			return nil, 0, 0, err
		}
	}
	for _, e := range []struct {
		name string
		fn   uint32
	}{{"cabi_realloc", poolFunc}, {"cabi_realloc_adapter", arenaFunc}} {
		entry := append(append(uleb(uint32(len(e.name))), e.name...), 0x00)
		entry = append(entry, uleb(e.fn)...)
		if exports.body, _, err = appendToVec(exports.body, entry); err != nil {
			return nil, 0, 0, err
		}
	}

	out = append([]byte{}, in[:8]...)
	for _, s := range sections {
		out = append(out, s.id)
		out = append(out, uleb(uint32(len(s.body)))...)
		out = append(out, s.body...)
	}
	return out, arena, pool, nil
}
