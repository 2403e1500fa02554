// The CUE evaluator sigil runs in WebAssembly: cuelang.org/go at the version
// sigstore policy-controller v0.15.1 resolves (through cosign v3.0.5), built
// with GOOS=wasip1 GOARCH=wasm by scripts/build-cue-wasm.sh. Upgrading CUE is
// a change of the require line below followed by `make cue-oracle`. The
// indirect requirements are raised to what policy-controller v0.15.1's own
// build resolves, so that the evaluator links the same code.
module github.com/sigil-dev/sigil/crates/sigil-cue/guest

go 1.25.0

require cuelang.org/go v0.15.4

require (
	github.com/cockroachdb/apd/v3 v3.2.1 // indirect
	github.com/emicklei/proto v1.14.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mitchellh/go-wordwrap v1.0.1 // indirect
	github.com/pelletier/go-toml/v2 v2.2.4 // indirect
	github.com/protocolbuffers/txtpbfmt v0.0.0-20251016062345-16587c79cd91 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/net v0.52.0 // indirect
	golang.org/x/text v0.35.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
