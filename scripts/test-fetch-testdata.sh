#!/usr/bin/env bash
# Tests scripts/fetch-testdata.sh without the network: a local git repository
# stands in for the upstream one. Checks that a pinned commit's folder lands
# in the cache, that a missing commit fails with a message naming the
# upstream, the commit and what to do, and that data found beside the
# checkout is preferred to the cache.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sigil-fetch-test.XXXXXX")
trap 'rm -rf -- "$TMP"' EXIT
fails=0
check() { # description command...
    local what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}

# shellcheck source=scripts/fetch-testdata.sh
. "$HERE/fetch-testdata.sh"

# A stand-in upstream: owner/name under a base directory, one commit with
# the folder the real repository has.
upstream=$TMP/base/acme/conformance
mkdir -p "$upstream/test/assets/bundle-verify/case-a"
echo '{"mediaType":"x"}' >"$upstream/test/assets/bundle-verify/case-a/bundle.sigstore.json"
git -C "$upstream" init -q
git -C "$upstream" config uploadpack.allowAnySHA1InWant true
git -C "$upstream" add -A
git -C "$upstream" -c user.name=t -c user.email=t@t commit -qm fixture
commit=$(git -C "$upstream" rev-parse HEAD)

GIT_BASE=file://$TMP/base/
CACHE=$TMP/cache/shared
check "a pinned commit's folder is fetched into the cache" \
    fetch sigstore-conformance/bundle-verify acme/conformance "$commit" test/assets/bundle-verify
check "the fetched case is where the tests look" \
    test -f "$CACHE/sigstore-conformance/bundle-verify/case-a/bundle.sigstore.json"
check "no temporary directory is left in the cache" \
    test ! -e "$CACHE/sigstore-conformance/bundle-verify.tmp"

missing=0000000000000000000000000000000000000000
out=$(fetch policy-controller-testdata acme/conformance "$missing" test/x 2>&1) && status=0 || status=$?
check "a commit the upstream lacks is an error" test "$status" -ne 0
check "the error names the upstream, the commit and what to do" \
    grep -q "could not fetch policy-controller-testdata from file://$TMP/base/acme/conformance at commit $missing" <<<"$out"
check "the error says how to provide the data by hand" grep -q "SIGIL_SHARED_DIR" <<<"$out"
check "nothing is left in the cache after a failed fetch" test ! -e "$CACHE/policy-controller-testdata"

# Preference order: SIGIL_SHARED_DIR, then shared/ above the checkout, then the cache.
mkdir -p "$TMP/env/policy-controller-testdata" "$CACHE/policy-controller-testdata"
check "SIGIL_SHARED_DIR wins over the cache" \
    test "$(SIGIL_SHARED_DIR=$TMP/env present policy-controller-testdata)" = "$TMP/env/policy-controller-testdata"

if ((fails)); then
    echo "test-fetch-testdata: $fails check(s) failed" >&2
    exit 1
fi
echo "test-fetch-testdata: all checks passed"
