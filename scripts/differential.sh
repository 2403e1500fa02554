#!/usr/bin/env bash
# Differential test: sigil, sigstore-python and cosign judge the same testkit
# bundles, offline, and must agree with the expected verdict.
#
# The scenarios (what is minted, the expected verdict, each peer's documented
# scope differences) live in crates/sigil-verifier/tests/differential.rs; this
# script installs the peers, builds sigil, mints the scenarios and runs:
#   sigil    verify-bundle --bundle B (--certificate-identity ID --certificate-oidc-issuer ISS | --key K)
#                          --trusted-root R ARTIFACT
#   sigstore --trust-config CFG verify identity --offline --bundle B --cert-identity ID
#                          --cert-oidc-issuer ISS ARTIFACT                 (keyless only)
#   cosign   verify-blob | verify-blob-attestation --type T  --bundle B --trusted-root R
#                          (--certificate-identity ID --certificate-oidc-issuer ISS | --key K)
#                          [--use-signed-timestamps] ARTIFACT
# Every verifier runs under `unshare -n` (no network at all) when that works.
#
# Usage: scripts/differential.sh [OUT_DIR]   (default: target/differential)
# Prints a table and ends with `N passed, M failed`; exits non-zero on any
# disagreement. Re-running rewrites the scenarios; nothing else is kept.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo/target/differential}"
cd "$repo" || exit 1

bin="$(scripts/install-tools.sh sigstore-python cosign)" || {
  echo "differential: installing the peers failed" >&2
  exit 1
}
cosign="$bin/cosign"
sigstore="$bin/sigstore"

cargo build -q --release --locked -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli || exit 1
sigil="$repo/target/release/sigil"

mkdir -p "$out"
SIGIL_DIFFERENTIAL_DIR="$out" cargo test -q --workspace --test differential -- \
  --ignored --exact write_the_differential_scenarios_for_the_script >"$out/mint.log" 2>&1 || {
  cat "$out/mint.log" >&2
  exit 1
}

# No network: a fresh network namespace if we may create one.
if unshare -n true 2>/dev/null; then
  offline=(unshare -n)
else
  echo "differential: unshare -n unavailable; relying on the verifiers' offline flags" >&2
  offline=()
fi
# sigstore-python writes its TUF cache under $HOME; keep it out of the user's.
export HOME="$out/.home"
mkdir -p "$HOME"

# run NAME LOG CMD...: prints ok or fail.
run() {
  local log="$1"; shift
  if "${offline[@]}" "$@" >"$log" 2>&1; then echo ok; else echo fail; fi
}

sigil_verdict() {
  local d="$1"
  if [ -f "$d/key.pub" ]; then
    run "$d/sigil.log" "$sigil" verify-bundle --bundle "$d/bundle.sigstore.json" \
      --key "$d/key.pub" --trusted-root "$d/trusted_root.json" "$d/artifact"
  else
    run "$d/sigil.log" "$sigil" verify-bundle --bundle "$d/bundle.sigstore.json" \
      --certificate-identity "$(cat "$d/identity")" --certificate-oidc-issuer "$(cat "$d/issuer")" \
      --trusted-root "$d/trusted_root.json" "$d/artifact"
  fi
}

python_verdict() {
  local d="$1"
  run "$d/sigstore-python.log" "$sigstore" --trust-config "$d/trust_config.json" verify identity \
    --offline --bundle "$d/bundle.sigstore.json" --cert-identity "$(cat "$d/identity")" \
    --cert-oidc-issuer "$(cat "$d/issuer")" "$d/artifact"
}

cosign_verdict() {
  local d="$1"
  local args=(--bundle "$d/bundle.sigstore.json" --trusted-root "$d/trusted_root.json")
  if [ -f "$d/key.pub" ]; then
    args+=(--key "$d/key.pub")
  else
    args+=(--certificate-identity "$(cat "$d/identity")" --certificate-oidc-issuer "$(cat "$d/issuer")")
  fi
  [ -f "$d/signed_timestamps" ] && args+=(--use-signed-timestamps)
  if [ -f "$d/predicate_type" ]; then
    run "$d/cosign.log" "$cosign" verify-blob-attestation "${args[@]}" \
      --type "$(cat "$d/predicate_type")" "$d/artifact"
  else
    run "$d/cosign.log" "$cosign" verify-blob "${args[@]}" "$d/artifact"
  fi
}

# judge PEER EXPECT GOT DIR: prints a table cell and records the outcome.
judge() {
  local peer="$1" expect="$2" got="$3" d="$4" outcome
  if [ -f "$d/scope.$peer" ]; then
    outcome=scope; printf '%s (scope)' "$got"
  elif [ "$got" = "$expect" ]; then
    outcome=pass; printf '%s' "$got"
  else
    outcome=fail; printf '%s MISMATCH' "$got"
  fi
  echo "$(basename "$d") $peer $outcome" >>"$out/results.txt"
}

: >"$out/results.txt"
{
  printf '%-40s %-6s %-14s %-20s %-20s\n' scenario expect sigil sigstore-python cosign
  while read -r name; do
    d="$out/$name"
    expect="$(cat "$d/expect")"
    s="$(judge sigil "$expect" "$(sigil_verdict "$d")" "$d")"
    if [ -f "$d/key.pub" ]; then
      # sigstore-python's CLI cannot verify with a key; the scope file says so.
      p="$(judge sigstore-python "$expect" n/a "$d")"
    else
      p="$(judge sigstore-python "$expect" "$(python_verdict "$d")" "$d")"
    fi
    c="$(judge cosign "$expect" "$(cosign_verdict "$d")" "$d")"
    printf '%-40s %-6s %-14s %-20s %-20s\n' "$name" "$expect" "$s" "$p" "$c"
  done <"$out/scenarios.txt"
} | tee "$out/table.txt"
passed=$(grep -c ' pass$' "$out/results.txt")
failed=$(grep -c ' fail$' "$out/results.txt")
scoped=$(grep -c ' scope$' "$out/results.txt")

echo
echo "Scope differences (not counted):"
for f in "$out"/*/scope.*; do
  [ -e "$f" ] || continue
  printf '  %s, %s: %s\n' "$(basename "$(dirname "$f")")" "${f##*/scope.}" "$(cat "$f")"
done
if [ "$failed" -gt 0 ]; then
  echo
  echo "Disagreements:"
  grep ' fail$' "$out/results.txt" | while read -r name peer _; do
    log="$out/$name/$peer.log"
    why="$( (grep -iE 'error|fail' "$log" || tail -n 2 "$log") | tr -s ' \n' ' ' | cut -c1-240)"
    printf '  %s, %s: %s\n' "$name" "$peer" "$why"
  done
fi
echo
echo "$passed passed, $failed failed ($scoped verdicts out of scope)"
[ "$failed" -eq 0 ]
