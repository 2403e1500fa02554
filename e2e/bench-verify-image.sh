#!/usr/bin/env bash
# `sigil verify` vs `cosign verify` on the same images in the same local
# registry (olareg), key-based, new bundle format and legacy format:
# whole-process wall-clock medians over N runs, their ratio, and sigil's
# registry round-trip count. Uses e2e/registry-fixtures.sh for the setup.
#   e2e/bench-verify-image.sh [N]     (default N=10; needs target/release/sigil)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-10}
SIGIL=${CARGO_TARGET_DIR:-target}/release/sigil
[ -x "$SIGIL" ] || cargo build -q --release --locked -p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli
export SIGIL N
# shellcheck disable=SC2016 # expanded by the inner shell
exec e2e/registry-fixtures.sh -- bash -c '
set -euo pipefail
. "$SIGIL_REGISTRY_FIXTURES"
median() { sort -n | awk "{a[NR]=\$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}"; }
time_ms() { # command... -> ms of one run (must succeed)
  local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))
}
printf "%-8s %10s %10s %7s %12s\n" format sigil_ms cosign_ms ratio round_trips
for f in NEW LEGACY; do
  img=$(eval echo "\$OLAREG_$f")
  legacy=(); [ "$f" = LEGACY ] && legacy=(--new-bundle-format=false)
  S=(); C=()
  for _ in $(seq 1 "$N"); do
    S+=("$(time_ms "$SIGIL" verify --key "$KEY1" --insecure-ignore-tlog --allow-insecure-registry "$img")")
    C+=("$(time_ms cosign verify --key "$KEY1" --insecure-ignore-tlog --allow-insecure-registry "${legacy[@]}" "$img")")
  done
  sm=$(printf "%s\n" "${S[@]}" | median); cm=$(printf "%s\n" "${C[@]}" | median)
  rt=$("$SIGIL" verify --key "$KEY1" --insecure-ignore-tlog --allow-insecure-registry --output json "$img" | sed -n "s/.*\"roundTrips\": \([0-9]*\).*/\1/p")
  printf "%-8s %10s %10s %7s %12s\n" "$f" "$sm" "$cm" "$(awk "BEGIN{printf \"%.1fx\", $cm/$sm}")" "$rt"
done
'
