#!/usr/bin/env bash
# Keeps every cargo build of `make test` on one of two package selections.
#
# Cargo resolves dependency features per invocation, from the packages it is
# asked to build. `cargo test -p sigil-cli` after `cargo test --workspace`
# therefore rebuilds most of the dependency tree with other features, and a
# release build of sigil-cli alone is rebuilt when the image asks for all
# three binaries. On two cores each such rebuild costs minutes of `.ci/run`.
# So:
#   - a debug build or test run selects the whole workspace (`--workspace`,
#     the selection `make unit` builds), narrowing by target (`--test NAME`,
#     `--lib`) and test filter instead of by package;
#   - a release build is `make release`'s: -p sigil-webhook -p sigil-audit
#     -p sigil-controller -p sigil-cli, nothing more or less.
# Scripts outside `make test` may choose otherwise when they say why here.
#
# Usage: scripts/check-cargo-selections.sh   (exit 1 naming each offending line)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RELEASE_SET="-p sigil-webhook -p sigil-audit -p sigil-controller -p sigil-cli"

# file: why it may build another selection (none of these runs in make test).
declare -A EXEMPT=(
  [e2e/demo.sh]="the demo builds only the three binaries it runs, the quickest start on a fresh machine"
  [scripts/cue-oracle.sh]="a by-hand check of the CUE corpus against the cue tool"
  [bench/notation-go.sh]="a by-hand benchmark (make bench-notation): the Notation verifier's loop alone, in release"
)

# The files make test runs, and the by-hand scripts beside them.
mapfile -t files < <({
  echo Makefile
  echo .ci/run
  git ls-files -- 'scripts/*.sh' 'e2e/*.sh' 'e2e/**/*.sh' 'bench/*.sh' 'bench/**/*.sh'
} | sort -u)

# The -p packages of a command line, sorted, on one line.
packages() {
  { grep -oE -- '-p [a-z0-9-]+' <<<"$1" || true; } | sort | tr '\n' ' ' | sed 's/ $//'
}

# FILE's lines as LINE:TEXT, a line ending in a backslash joined with the next.
joined() {
  awk '{
    if (held == "") { start = NR; held = $0 } else { held = held " " $0 }
    if (held ~ /\\$/) { sub(/\\$/, "", held); next }
    print start ":" held; held = ""
  } END { if (held != "") print start ":" held }' "$1"
}

bad=0
checked=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if [ -n "${EXEMPT[$f]:-}" ]; then
    continue
  fi
  while IFS=: read -r line text; do
    # Comments and log messages that only name a command are not builds.
    [[ $text =~ ^[[:space:]]*# ]] && continue
    [[ $text =~ (^|[[:space:]\;\|\&\(])(cargo|\$\(CARGO\))[[:space:]]+(build|test|run|check)([[:space:]]|$) ]] || continue
    [[ $text =~ log[[:space:]]+\" ]] && continue
    checked=$((checked + 1))
    if [[ $text == *--release* ]]; then
      got=$(packages "$text")
      if [ "$got" != "$(packages "$RELEASE_SET")" ]; then
        echo "check-cargo-selections: $f:$line: a release build of '${got:-no package}' instead of make release's '$RELEASE_SET': $text" >&2
        bad=1
      fi
    elif [[ $text != *--workspace* ]]; then
      echo "check-cargo-selections: $f:$line: a debug build without --workspace (select by --test/--lib and filters instead): $text" >&2
      bad=1
    fi
  done < <(joined "$f")
done
if [ "$bad" != 0 ]; then
  echo "check-cargo-selections: another package selection rebuilds the dependency tree with other features; see the header of $0" >&2
  exit 1
fi
echo "check-cargo-selections: ${#files[@]} files, $checked cargo builds on the two selections"
