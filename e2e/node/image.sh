#!/usr/bin/env bash
# The node's own images, built by scripts/oci-image.py (no container engine)
# and pushed with crane:
#   pause    the pod sandbox process (e2e/node/pause, a static Go program),
#            user 65535 as the upstream pause image
#   busybox  Debian's busybox-static, `sleep` as its command: the workload
#            the e2e suite signs and runs
#
# Usage: e2e/node/image.sh pause|busybox LAYOUT-DIR REGISTRY/REPO:TAG [--label K=V]...
# Prints REGISTRY/REPO@DIGEST. Plain HTTP to the registry (a local one).
set -euo pipefail
REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)

die() { printf 'node-image: error: %s\n' "$*" >&2; exit 1; }
(($# >= 3)) || { sed -n '9,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }
kind=$1 out=$2 ref=$3
shift 3
extra=()
while (($#)); do
    case $1 in
        --label) extra+=(--label "${2:?--label needs K=V}"); shift ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
mkdir -p -- "$(dirname -- "$out")"
case $kind in
    pause)
        bin="$out.bin"
        (cd "$REPO/e2e/node/pause" && CGO_ENABLED=0 GOTOOLCHAIN=local \
            go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$bin" .) || die "building e2e/node/pause failed"
        python3 "$REPO/scripts/oci-image.py" --out "$out" --file "$bin:/pause:0755" \
            --user 65535:65535 --entrypoint '["/pause"]' "${extra[@]}" >/dev/null
        ;;
    busybox)
        deb=$("$REPO/scripts/fetch-debs.sh" busybox-static) || die "downloading busybox-static failed"
        python3 "$REPO/scripts/oci-image.py" --out "$out" --deb "$deb=/bin/busybox" \
            --entrypoint '["/bin/busybox"]' --cmd '["sleep","3600"]' "${extra[@]}" >/dev/null
        ;;
    *) die "unknown image $kind (pause or busybox)" ;;
esac
crane=$("$REPO/scripts/install-tools.sh" crane)/crane
"$crane" push --insecure "$out" "$ref" >/dev/null 2>&1 || die "crane push $out $ref failed"
digest=$("$crane" digest --insecure "$ref") || die "crane digest $ref failed"
printf '%s@%s\n' "${ref%:*}" "$digest"
