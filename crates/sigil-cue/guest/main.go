//go:build wasip1

// The module's interface to its host (sigil-cue), built as a WASI reactor
// (-buildmode=c-shared): the host calls _initialize once, then any number of
// evaluations on the same instance. One request at a time: the host writes
// the policy and the document into the buffer input_buffer returns, calls
// compile or evaluate with their lengths, and reads the JSON outcome at
// result_ptr/result_len. Raising abiVersion is how the host learns that this
// contract changed.
package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"unsafe"
)

const abiVersion = 1

// Status codes of compile and evaluate.
const (
	statusPass    = 0
	statusFail    = 1
	statusRequest = 2 // the host broke the contract (lengths beyond the buffer)
)

// buffer holds the current request; result the last outcome. Both live in
// globals so that the garbage collector keeps them while the host reads or
// writes them.
var (
	buffer []byte
	result []byte
)

//go:wasmexport abi_version
func abiVersionExport() uint32 { return abiVersion }

// describe writes {"abi":…,"cue":…,"go":…} to the result: the handshake that
// lets the host refuse a module built from another CUE release.
//
//go:wasmexport describe
func describe() {
	info := map[string]any{"abi": abiVersion, "go": runtime.Version(), "cue": "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "cuelang.org/go" {
				info["cue"] = dep.Version
			}
		}
	}
	setResult(info)
}

// input_buffer returns a buffer of at least size bytes (never empty) for the
// next request. A buffer much larger than needed is released, so that one
// large document does not pin its memory for the instance's lifetime.
//
//go:wasmexport input_buffer
func inputBuffer(size uint32) unsafe.Pointer {
	n := int(size)
	if n < 1 {
		n = 1
	}
	if cap(buffer) < n || (cap(buffer) > 1<<20 && cap(buffer) > 4*n) {
		buffer = make([]byte, n)
	}
	buffer = buffer[:cap(buffer)]
	return unsafe.Pointer(&buffer[0])
}

//go:wasmexport compile
func compile(policyLen uint32) uint32 {
	if uint64(policyLen) > uint64(len(buffer)) {
		return statusRequest
	}
	return finish(compilePolicy(string(buffer[:policyLen])))
}

//go:wasmexport evaluate
func evaluateExport(policyLen, documentLen uint32) uint32 {
	if uint64(policyLen)+uint64(documentLen) > uint64(len(buffer)) {
		return statusRequest
	}
	policy := string(buffer[:policyLen])
	document := buffer[policyLen : policyLen+documentLen]
	return finish(evaluate(policy, document))
}

//go:wasmexport result_ptr
func resultPtr() unsafe.Pointer {
	if len(result) == 0 {
		return nil
	}
	return unsafe.Pointer(&result[0])
}

//go:wasmexport result_len
func resultLen() uint32 { return uint32(len(result)) }

// set_memory_limit makes the Go collector work harder as the heap nears
// what the host allows, instead of growing into the host's hard limit.
//
//go:wasmexport set_memory_limit
func setMemoryLimit(mib uint32) { debug.SetMemoryLimit(int64(mib) << 20) }

func finish(o outcome) uint32 {
	setResult(o)
	if o.OK {
		return statusPass
	}
	return statusFail
}

func setResult(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"ok":false,"stage":"eval","message":"sigil-cue guest: cannot encode the outcome"}`)
	}
	result = b
}

func main() {}
