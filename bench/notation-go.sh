#!/usr/bin/env bash
# CPU per Notary Project signature verification, in process: sigil's
# verifier (sigil-notation, release build) beside notation-go v1.3.2's (the
# Notary Project's reference library, in the testkit's notation-signer), on
# the same envelopes notation-go signed, JWS and COSE (P-256 signing
# certificate, P-384 intermediate and root, strict trust policy, revocation
# skipped). Each process verifies one envelope COUNT times; the figure is its
# user+sys CPU time over COUNT, the median of RUNS processes.
#
# Usage: bench/notation-go.sh [COUNT]    default 2000; RUNS (default 5)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
count=${1:-2000}
runs=${RUNS:-5}

bin=$(scripts/install-tools.sh notation-signer)
cargo build -q --release -p sigil-notation --example verify_loop
cargo build -q --workspace --example notation_pki
target=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d "${TMPDIR:-/tmp}/sigil-notation-go.XXXXXX")
trap 'rm -rf -- "$work"' EXIT
"$target/debug/examples/notation_pki" "$work" >/dev/null

# The artifact: a small OCI image manifest.
printf '%s' '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}' >"$work/manifest.json"
media=application/vnd.oci.image.manifest.v1+json
digest=sha256:$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
size=$(stat -c %s "$work/manifest.json")
repo=registry.example/acme/app

# Microseconds of CPU per verification of one process, from /usr/bin/time.
cpu_per() {
    /usr/bin/time -f '%U %S' -o "$work/time" "$@" >/dev/null ||
        { echo "bench-notation: $1 failed" >&2; return 1; }
    awk -v n="$count" '{ printf "%.0f\n", ($1 + $2) * 1e6 / n }' "$work/time"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '| envelope | sigil (µs CPU) | notation-go (µs CPU) | notation-go / sigil |\n|---|---|---|---|\n'
for format in jws cose; do
    "$bin/notation-signer" -key "$work/leaf.key" -chain "$work/chain.pem" -format "$format" \
        -media-type "$media" -digest "$digest" -size "$size" >"$work/sig.$format"
    sigil=() go=()
    for _ in $(seq "$runs"); do
        s=$(cpu_per "$target/release/examples/verify_loop" "$work/config" "$work/sig.$format" \
            "$media" "$digest" "$size" "$repo" "$count") || exit 1
        g=$(cpu_per "$bin/notation-signer" -verify-loop "$count" -config "$work/config" \
            -envelope "$work/sig.$format" -reference "$repo@$digest" -media-type "$media" \
            -digest "$digest" -size "$size") || exit 1
        sigil+=("$s") go+=("$g")
    done
    s=$(printf '%s\n' "${sigil[@]}" | median)
    g=$(printf '%s\n' "${go[@]}" | median)
    awk -v f="$format" -v s="$s" -v g="$g" 'BEGIN { printf "| %s | %d | %d | %.1f× |\n", toupper(f), s, g, g / s }'
done
