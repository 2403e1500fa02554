#!/usr/bin/env bash
# A helm post-renderer that points every TrustRoot's TUF source
# (`spec.remote.mirror` and `spec.remote.root`) at another mirror and root,
# as an administrator does for a cluster that reaches the vendor's mirror
# only through a copy of its own. The e2e suite installs GitHub's
# trust-policies chart with it, against the testkit's TUF repository:
#
#   helm install ... --post-renderer e2e/tuf-mirror-post-renderer.sh \
#     --post-renderer-args MIRROR_URL --post-renderer-args ROOT_BASE64
#
# Reads the rendered manifests on stdin, writes them on stdout; fails when
# they hold no `mirror:` to rewrite.
set -euo pipefail
if (($# != 2)); then
  echo "usage: $0 MIRROR_URL ROOT_BASE64 <manifests >manifests" >&2
  exit 2
fi
awk -v mirror="$1" -v root="$2" '
  # The lines of the replaced root (a block scalar): deeper than its key.
  skip && NF > 0 && match($0, /^ */) && RLENGTH > indent { next }
  { skip = 0 }
  /^ *mirror: / {
    match($0, /^ */)
    printf "%smirror: %s\n", substr($0, 1, RLENGTH), mirror
    mirrors++
    next
  }
  /^ *root: / {
    match($0, /^ */)
    indent = RLENGTH
    printf "%sroot: %s\n", substr($0, 1, RLENGTH), root
    skip = 1
    next
  }
  { print }
  END {
    if (mirrors == 0) {
      print "tuf-mirror-post-renderer: the manifests have no spec.remote.mirror to rewrite" > "/dev/stderr"
      exit 1
    }
  }
'
