#!/usr/bin/env bash
# Runs sigil's fuzz targets for a bounded time each (`make fuzz`).
#
#   fuzz/run.sh [TARGET...]     every target when none is named
#
# FUZZ_SECONDS   seconds per target (default 30)
# FUZZ_SANITIZER cargo-fuzz sanitizer (default none: sigil forbids unsafe
#                code, so AddressSanitizer mostly slows the run; `address`
#                checks the unsafe code of dependencies too)
# FUZZ_RSS_MB    libFuzzer's memory limit per target (default 4096)
# FUZZ_TARGET_DIR cargo's target directory (default the repository's
#                target/fuzz, next to the stable builds: one target/ per checkout)
#
# Builds with the nightly toolchain (fuzzing only; the workspace stays on
# stable), writes the seed corpora (testkit material, the
# sigstore-conformance cases as sigil-testdata finds them, the repository's
# fixtures) into fuzz/corpus/, then runs each target with `nice` and prints
# one line per target: seconds, executions, corpus size, crashes. Exits
# non-zero when any target crashed; the inputs are in fuzz/artifacts/<target>/.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
seconds=${FUZZ_SECONDS:-30}
sanitizer=${FUZZ_SANITIZER:-none}
rss=${FUZZ_RSS_MB:-4096}
target_dir=${FUZZ_TARGET_DIR:-$here/../target/fuzz}
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is missing; install it with \`cargo install cargo-fuzz\` (the nightly toolchain is needed too: \`rustup toolchain install nightly\`)" >&2
    exit 2
fi

mapfile -t all < <(cargo +nightly fuzz list | grep -v '^write_seeds$')
if [ "$#" -gt 0 ]; then targets=("$@"); else targets=("${all[@]}"); fi

nice cargo +nightly fuzz build -s "$sanitizer" --target-dir "$target_dir"
bin="$target_dir/$triple/release"
SIGIL_FUZZ_CORPUS="$here/corpus" "$bin/write_seeds"

failed=0
summary=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    before=$(find "artifacts/$t" -type f | wc -l)
    log="artifacts/$t.log"
    start=$(date +%s)
    set +e
    # Earlier findings (fuzz/regressions/<target>/) are replayed first with
    # the corpus, so a fixed finding that comes back fails the run at once.
    regressions=()
    if [ -d "regressions/$t" ]; then regressions=("regressions/$t"); fi
    nice "$bin/$t" "corpus/$t" "${regressions[@]}" \
        -artifact_prefix="artifacts/$t/" \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb="$rss" \
        -max_len=262144 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    took=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    corpus=$(find "corpus/$t" -type f | wc -l)
    crashes=$(( $(find "artifacts/$t" -type f | wc -l) - before ))
    line="$t: ${took}s, ${execs:-?} executions, corpus ${corpus}, crashes ${crashes}"
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        failed=1
        line="$line (exit $rc; see fuzz/$log and fuzz/artifacts/$t/)"
    fi
    echo "fuzz: $line"
    summary+=("$line")
done

echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
exit "$failed"
