# syntax=docker/dockerfile:1.7
# sigil's image: sigil-webhook, sigil-audit, sigil-controller and the sigil CLI on a
# distroless base (glibc, CA certificates, no shell), running as 65532, with
# the CUE evaluator (cue.wasm) where the binaries look for it.
#   docker build -t ghcr.io/sigil-dev/sigil:dev .
# The Helm chart picks the binary with `command`; the default entrypoint is
# the CLI, so `docker run IMAGE verify ghcr.io/org/app:1.0 ...` works.

# Stable toolchain, at least the workspace's rust-version (1.89). The builder
# and the runtime are both Debian 12, so the binaries' glibc matches.
ARG RUST_VERSION=1.95
# Go for the CUE evaluator (crates/sigil-cue/guest/go.mod says which it needs).
ARG GO_VERSION=1.26
FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
# Only what cargo reads: manifests, the lock file, the crates (tests/data
# included, as some unit-test fixtures are compiled from it) and the e2e
# suite, a workspace member cargo loads although it is not built here.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY e2e/suite ./e2e/suite
# The registry and target caches survive between builds (BuildKit); the
# binaries are copied out because cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked \
        -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli \
 && install -D -s -m 0755 -t /out \
        target/release/sigil-webhook target/release/sigil-audit \
        target/release/sigil-controller target/release/sigil

# The CUE evaluator: cuelang.org/go for GOOS=wasip1, built as
# scripts/build-cue-wasm.sh builds it (same flags, so the same bytes for the
# same Go version).
FROM docker.io/library/golang:${GO_VERSION}-bookworm AS cue
WORKDIR /src
COPY crates/sigil-cue/guest ./
RUN GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
    go build -trimpath -buildmode=c-shared -ldflags='-s -w -buildid=' -o /out/cue.wasm .

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="sigil" \
      org.opencontainers.image.description="Kubernetes admission for Sigstore-signed images" \
      org.opencontainers.image.source="https://github.com/sigil-dev/sigil" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/ /usr/local/bin/
# ../lib/sigil/cue.wasm beside the binaries: their default CUE module.
COPY --from=cue /out/cue.wasm /usr/local/lib/sigil/cue.wasm
# Numeric, so runAsNonRoot can verify it without an /etc/passwd lookup.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sigil"]
