# sigil: build, test, lint, benchmark and conformance targets.
# `make test` is the README's test command and what CI runs first.

CARGO ?= cargo
SHARED ?= $(abspath ../shared)
SIGIL := target/release/sigil

.PHONY: all build release test test-targets unit testdata test-scripts fmt fmt-check lint bench bench-notation bench-peers conformance ci demo demo-down e2e-local e2e-kind e2e-node image image-check lint-shell cluster-tools cluster-up cluster-down cluster-status cluster-smoke tools clean test-registry test-kms differential bench-image

all: build

build:
	$(CARGO) build --workspace --all-targets

## The three release binaries, built together as scripts/image.sh builds
## them (the same feature set, so `make image` and `make conformance` share one build).
release:
	$(CARGO) build --release --locked -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli

## Man pages for sigil and each subcommand, generated from its --help
## (clap_mangen), into target/man (MAN_DIR=...): `man -l target/man/sigil.1`.
MAN_DIR ?= target/man
.PHONY: man
man:
	$(CARGO) build -q --workspace --bins
	target/debug/sigil manpages --out-dir $(MAN_DIR)

## The full test suite: formatting, lints (Rust, shell, chart, rendered
## manifests), unit/integration/property tests, real registries with real
## cosign signatures, the differential test against sigstore-python and
## cosign, KMS-held keys (OpenBao, moto), the end-to-end suite on a local
## control plane, the container image (reproducible, as the Dockerfile), and
## sigil installed by its chart from that image on a real node (root).
## Installs the tools it needs itself. e2e-node comes after e2e-local and
## image-check, which build the cluster's binaries and the release binaries it
## reuses.
TEST_TARGETS := fmt-check lint lint-shell test-scripts unit chart-lint deploy-check test-registry test-kms differential e2e-local image-check e2e-node
test: $(TEST_TARGETS)

## The parts of `make test`, in order (.ci/run times each).
test-targets:
	@echo $(TEST_TARGETS)

## The Rust tests alone (no registries, no peer verifiers): the quick loop.
## The public test data they read is found beside the checkout (../shared) or
## fetched at pinned commits into .cache/testdata (scripts/fetch-testdata.sh).
unit: testdata cue-module
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc

fmt:
	$(CARGO) fmt --all
	cd fuzz && $(CARGO) fmt

fmt-check:
	$(CARGO) fmt --all -- --check
	cd fuzz && $(CARGO) fmt -- --check

## The fuzz crate (its own workspace, fuzzed with nightly) is linted here on
## stable, into its own target directory, so that its targets keep compiling
## against the crates they fuzz.
lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	cd fuzz && $(CARGO) clippy --locked --all-targets --target-dir ../target/fuzz-lint -- -D warnings

## Criterion benchmarks of bundle verification.
bench:
	$(CARGO) bench -p sigil-verifier --bench verify

## The sigstore-conformance bundle-verification suite, path and digest modes.
conformance: release
	$(SHARED)/tools/sigstore-conformance-run -- $(SIGIL)

## ---- FIPS build: AWS-LC's FIPS 140-3 module (aws-lc-fips-sys) for every
## signature, digest and TLS connection. Needs CMake and Go besides a C
## compiler; its own target directory, so it never rebuilds the default one.
FIPS_TARGET_DIR ?= target/fips
FIPS_FEATURES := sigil-cli/fips,sigil-webhook/fips,sigil-audit/fips,sigil-controller/fips
.PHONY: release-fips conformance-fips

## sigil, sigil-webhook, sigil-audit and sigil-controller in $(FIPS_TARGET_DIR)/release;
## they refuse to start unless the module reports FIPS mode.
release-fips:
	@command -v cmake >/dev/null && command -v go >/dev/null || { \
	  echo "release-fips: the FIPS module needs cmake and go on PATH (apt-get install cmake golang-go)" >&2; exit 1; }
	CARGO_TARGET_DIR=$(FIPS_TARGET_DIR) $(CARGO) build --release --locked \
	  -p sigil-cli -p sigil-webhook -p sigil-audit -p sigil-controller --features $(FIPS_FEATURES)
	$(FIPS_TARGET_DIR)/release/sigil --version

## The conformance suite through the FIPS build of sigil.
conformance-fips: release-fips
	$(SHARED)/tools/sigstore-conformance-run -- $(FIPS_TARGET_DIR)/release/sigil

ci: test conformance

## sigil, sigstore-python and cosign judge the same testkit bundles offline.
differential:
	scripts/differential.sh

## CPU per Notary Project verification: sigil's verifier and notation-go's,
## in process, on the same notation-go-signed envelopes.
bench-notation:
	bench/notation-go.sh

## Whole-process verification time against sigstore-python and cosign.
bench-peers:
	bench/verify-peers.sh

## `sigil verify` against real registries (olareg, docker-registry) and real cosign v3 signatures.
test-registry: cue-module
	e2e/registry-fixtures.sh

## key.kms against OpenBao (transit) and moto (AWS KMS) on 127.0.0.1, with
## images cosign signed through those KMS keys.
test-kms:
	e2e/kms-fixtures.sh

## sigil, policy-controller and Kyverno side by side on the local node (root;
## run by hand, not part of `make test`): docs/benchmarks.md.
.PHONY: bench-cluster
bench-cluster:
	bench/cluster.sh

## Policies by the thousand on the local control plane (no node; run by
## hand, not in make test or .ci/run): bench/policy-scale.md.
.PHONY: bench-policy-scale
bench-policy-scale:
	bench/policy-scale.sh

## Verdicts of policy-controller's policy-tester and `sigil policy test` on
## the same (policy, image) pairs, local registries only (run by hand, not
## part of `make test`: it builds policy-controller): docs/policy-differential.md.
.PHONY: policy-differential
policy-differential:
	bench/policy-differential.sh

## Verdicts of Kyverno's own CLI (`kyverno apply`) on Kyverno policies and of
## `sigil policy test` on what `sigil policy convert` made of them, local
## registries only (run by hand, not part of `make test`: it builds Kyverno's
## CLI): docs/kyverno-differential.md.
.PHONY: kyverno-differential
kyverno-differential:
	bench/kyverno-differential.sh

## `sigil verify` vs `cosign verify`, key-based, both formats, on a local registry.
bench-image: release
	bench/verify-image.sh

## Tools used by tests and benchmarks (cosign, olareg, crane, sigstore-python).
tools:
	scripts/install-tools.sh

## The local demo: control plane, registry, signed and unsigned pods, sigil's verdicts.
demo:
	e2e/demo.sh up

## Stops and removes everything `make demo` started.
demo-down:
	e2e/demo.sh down

## The end-to-end suite on a local kube-apiserver + etcd + kube-controller-manager.
e2e-local:
	e2e/run-local.sh

## The end-to-end suite on kind with the chart and the container image (needs Docker).
e2e-kind:
	e2e/kind.sh

## The end-to-end suite against sigil installed by its chart, from its own
## image, on a real node of this machine (kubelet, containerd, CNI; root),
## plus failure and change under load; `down` must leave nothing behind.
e2e-node:
	e2e/run-node.sh

## An earlier version (UPGRADE_FROM=<git ref>; default: before the last
## change of a CRD or of the policy snapshot's format, built once per commit
## into .cache/upgrade) upgraded to a rehearsed release of this checkout and
## rolled back, under steady admissions, on the e2e node (root; beside
## e2e-node, not part of `make test`: a cold build of the earlier version
## would take CI past its time budget).
.PHONY: e2e-upgrade
e2e-upgrade:
	SIGIL_E2E_PHASES="release upgrade" $(if $(UPGRADE_FROM),SIGIL_UPGRADE_FROM=$(UPGRADE_FROM)) e2e/run-node.sh

## sigil's OCI image without a container engine (target/oci/sigil); with
## PUSH=host:port/repo[:tag] also pushed (INSECURE=1: plain HTTP). FIPS=1:
## the FIPS variant (release-fips binaries; target/oci/sigil-fips, tag
## <appVersion>-fips).
image:
	scripts/image.sh $(if $(FIPS),--fips) $(if $(PUSH),--push $(PUSH)) $(if $(INSECURE),--insecure)

## The image builds reproducibly and agrees with the Dockerfile (root).
image-check:
	scripts/image-check.sh

## The local control plane alone (etcd, kube-apiserver, kube-controller-manager on
## 127.0.0.1); `e2e/local-cluster.sh up --node` adds a node (e2e/node/README.md).
cluster-tools:
	e2e/cluster/build.sh
cluster-up:
	e2e/local-cluster.sh up
cluster-down:
	e2e/local-cluster.sh down
cluster-status:
	e2e/local-cluster.sh status
cluster-smoke:
	e2e/cluster/smoke.sh

## The public test data (sigstore-conformance cases, policy-controller's
## example policies): found in ../shared or $$SIGIL_SHARED_DIR, else fetched.
testdata:
	scripts/fetch-testdata.sh

## sigil's CUE evaluator: cuelang.org/go compiled by Go (1.25 or newer) to
## WebAssembly, into .cache/cue/sigil-cue.wasm; rebuilt only when the guest
## sources or the Go version change. Tests that evaluate CUE read it there
## (or from $$SIGIL_CUE_MODULE); without Go this fails and says so.
.PHONY: cue-module cue-oracle bench-cue
cue-module:
	scripts/build-cue-wasm.sh >/dev/null

## `cue vet` (cuelang.org/go at the guest's release, installed with Go)
## re-derives the verdicts the CUE corpus records.
cue-oracle:
	scripts/cue-oracle.sh

## Criterion benchmark of one CUE evaluation (policy-controller's policies).
bench-cue: cue-module
	$(CARGO) bench -p sigil-cue --bench eval

## cargo-fuzz targets (fuzz/, nightly only; not part of `make test`), each for
## FUZZ_SECONDS; see fuzz/README.md.
FUZZ_SECONDS ?= 30
.PHONY: fuzz
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh

## Tests of the project's own scripts that need no cluster or registry.
test-scripts:
	scripts/test-fetch-testdata.sh
	bench/test.sh
	scripts/check-cargo-selections.sh
	scripts/check-architecture.py

## shellcheck over every script and the workflows' run steps.
lint-shell:
	scripts/lint-shell.sh

clean:
	$(CARGO) clean

## ---- Packaging: Helm chart, plain manifests (charts/sigil, deploy/sigil.yaml) ----
.PHONY: chart-lint deploy-check deploy-render

## Flags the chart may pass that the built binaries do not have yet: reported
## instead of failed by chart-check (empty: every flag must exist).
CHART_PENDING_FLAGS ?=

## helm lint --strict + helm template for every charts/sigil/ci/*-values.yaml,
## with assertions on each rendering (and flags against the built binaries' --help).
## The binaries come from the workspace build `make unit` makes: another
## package selection resolves other features and rebuilds most of the tree
## (scripts/check-cargo-selections.sh keeps every script to the two selections).
chart-lint:
	$(CARGO) build -q --workspace --all-targets
	SIGIL_REQUIRE_BINARIES=1 SIGIL_PENDING_FLAGS="$(CHART_PENDING_FLAGS)" scripts/chart-check.sh

## Fails with a diff when deploy/sigil.yaml is not what the chart renders.
deploy-check:
	scripts/render-deploy.sh --check

## Re-renders deploy/sigil.yaml from the chart's defaults.
deploy-render:
	scripts/render-deploy.sh
