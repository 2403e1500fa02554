#!/usr/bin/env bash
# Whole-process verification time of the same bundle by sigil, sigstore-python
# and cosign, measured with hyperfine, offline (`unshare -n` when allowed).
#
# Bundles (from ../shared/sigstore-conformance/bundle-verify):
#   dsse     happy-path-intoto-in-dsse-v3: public-good DSSE, Rekor v1 dsse entry
#            (chain + SCT + inclusion proof + checkpoint + SET)
#   rekor2   rekor2-happy-path: v0.3 message signature, Rekor v2 entry and an
#            RFC 3161 timestamp, with its own trusted_root.json
#
# Usage: scripts/bench-peers.sh [OUT_DIR]   (default: target/bench-peers)
# Env: RUNS (default 20), WARMUP (default 3), SIGIL_BIN (a sigil binary to
# measure instead of building target/release/sigil, e.g. the FIPS build in
# target/fips/release/sigil or an older build for before/after figures).
# Writes OUT_DIR/<bundle>.json and .md (hyperfine exports) and prints the
# medians with the ratios peer/sigil.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo/target/bench-peers}"
runs="${RUNS:-20}"
warmup="${WARMUP:-3}"
cd "$repo"

cases="$repo/../shared/sigstore-conformance/bundle-verify"
trust="$repo/../shared/trust"
[ -d "$cases" ] || { echo "bench-peers: $cases is missing" >&2; exit 1; }

if ! command -v hyperfine >/dev/null; then
  echo "bench-peers: installing hyperfine (Debian package)" >&2
  apt-get install -y -q hyperfine >/dev/null
fi
bin="$(scripts/install-tools.sh sigstore-python cosign)"
if [ -n "${SIGIL_BIN:-}" ]; then
  sigil="$SIGIL_BIN"
  [ -x "$sigil" ] || { echo "bench-peers: SIGIL_BIN=$sigil is not an executable" >&2; exit 1; }
else
  cargo build -q --release --locked -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli
  sigil="$repo/target/release/sigil"
fi
"$sigil" --version >&2
mkdir -p "$out"
# sigstore-python keeps its TUF cache under $HOME: give it a private one.
export HOME="$out/home"
mkdir -p "$HOME"

id="https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
iss="https://token.actions.githubusercontent.com"
artifact="$cases/a.txt"

# sigstore-python takes a non-default trust root only as a ClientTrustConfig.
python3 - "$cases/rekor2-happy-path/trusted_root.json" "$trust/signing_config.staging.v0.2.json" \
  "$out/rekor2-trust-config.json" <<'PY'
import json, sys
root, signing, out = sys.argv[1:]
with open(root) as r, open(signing) as s, open(out, "w") as o:
    json.dump({"mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
               "trustedRoot": json.load(r), "signingConfig": json.load(s)}, o)
PY

offline=()
if unshare -n true 2>/dev/null; then offline=(unshare -n); fi

# bench NAME SIGIL_CMD PYTHON_CMD COSIGN_CMD
bench() {
  local name="$1"; shift
  "${offline[@]}" hyperfine -N --warmup "$warmup" --runs "$runs" \
    --export-json "$out/$name.json" --export-markdown "$out/$name.md" \
    -n sigil "$1" -n sigstore-python "$2" -n cosign "$3" >"$out/$name.log"
}

b="$cases/happy-path-intoto-in-dsse-v3/bundle.sigstore.json"
tr="$trust/trusted_root.public-good.json"
bench dsse \
  "$sigil verify-bundle --bundle $b --certificate-identity $id --certificate-oidc-issuer $iss --trusted-root $tr $artifact" \
  "$bin/sigstore verify identity --offline --bundle $b --cert-identity $id --cert-oidc-issuer $iss $artifact" \
  "$bin/cosign verify-blob-attestation --bundle $b --certificate-identity $id --certificate-oidc-issuer $iss --trusted-root $tr --type https://slsa.dev/provenance/v1 $artifact"

b="$cases/rekor2-happy-path/bundle.sigstore.json"
tr="$cases/rekor2-happy-path/trusted_root.json"
bench rekor2 \
  "$sigil verify-bundle --bundle $b --certificate-identity $id --certificate-oidc-issuer $iss --trusted-root $tr $artifact" \
  "$bin/sigstore --trust-config $out/rekor2-trust-config.json verify identity --offline --bundle $b --cert-identity $id --cert-oidc-issuer $iss $artifact" \
  "$bin/cosign verify-blob --bundle $b --certificate-identity $id --certificate-oidc-issuer $iss --trusted-root $tr --use-signed-timestamps $artifact"

python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
print(f"{'bundle':<8} {'verifier':<16} {'median':>10} {'min':>10} {'max':>10} {'runs':>5} {'x sigil':>8}")
for name in ("dsse", "rekor2"):
    results = json.load(open(f"{out}/{name}.json"))["results"]
    med = {r["command"]: statistics.median(r["times"]) for r in results}
    for r in results:
        m = med[r["command"]]
        print(f"{name:<8} {r['command']:<16} {m*1e3:>8.1f}ms {min(r['times'])*1e3:>8.1f}ms "
              f"{max(r['times'])*1e3:>8.1f}ms {len(r['times']):>5} {m/med['sigil']:>7.1f}x")
PY
echo "hyperfine exports: $out/{dsse,rekor2}.{json,md}"
