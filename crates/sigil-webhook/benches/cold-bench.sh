#!/usr/bin/env bash
# Cold admission against a real registry: olareg (referrers API) holding
# SIGIL_COLD_IMAGES (40) distinct images, each signed key-based by cosign v3 in
# the new bundle format, offline (no tlog). The release webhook enforces a
# one-policy snapshot; each image is reviewed once (verdict cache cold: every
# digest is new), then again (warm). Reports registry round trips per image
# (from sigil_registry_requests_total), webhook CPU ms per cold review (from
# every thread's /proc/PID/task/*/schedstat), and reviews/s and latency cold
# and warm, for one keep-alive TLS client sending reviews one after another.
# Fails when a cold image costs more than DESIGN.md's target: 4 round trips
# and 2 ms of CPU.
#
# Usage: crates/sigil-webhook/benches/cold-bench.sh   (tools from
# scripts/install-tools.sh; SIGIL_TOOLS_DIR reuses another checkout's cache)
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${SIGIL_COLD_IMAGES:-40}
BIN=$(scripts/install-tools.sh cosign crane olareg)
export PATH=$BIN:$PATH
cargo build --release -q -p sigil-webhook
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# shellcheck source=e2e/lib.sh
. e2e/lib.sh   # free_port, wait_url
wait_http() { # url, bounded to 10 s
  wait_url "$1" 10 || { echo "no answer from $1 within 10s" >&2; return 1; }
}

REG=127.0.0.1:$(free_port)
olareg serve --addr 127.0.0.1 --port "${REG#*:}" --store-type mem >"$dir/olareg.log" 2>&1 &
pids+=($!)
wait_http "http://$REG/v2/"

cd "$dir"
export COSIGN_PASSWORD='' COSIGN_YES=true TUF_ROOT=$dir/tuf HOME=$dir
cosign generate-key-pair --output-key-prefix key >/dev/null 2>&1
SIGN=(--use-signing-config=false --tlog-upload=false --allow-insecure-registry --yes)
: >digests
for i in $(seq 1 "$N"); do
  mkdir -p "l$i"; echo "image $i" >"l$i/hello.txt"
  tar -C "l$i" --owner=0 --group=0 --mtime=@0 -cf "l$i.tar" hello.txt
  crane append --insecure --oci-empty-base -f "l$i.tar" -t "$REG/bench/app:$i" >/dev/null 2>&1
  d=$(crane digest --insecure "$REG/bench/app:$i")
  cosign sign --key key.key "${SIGN[@]}" "$REG/bench/app@$d" >/dev/null 2>&1
  echo "$d" >>digests
done
echo "pushed and signed $N images in olareg at $REG" >&2

python3 - "$dir/key.pub" >snapshot.json <<'PY'
import json, sys
key = open(sys.argv[1]).read()
print(json.dumps({
  "apiVersion": "policy.sigil.dev/snapshot/v1", "revision": 1,
  "generatedAt": "2026-01-01T00:00:00Z", "trustRoots": [],
  "policies": [{"name": "bench-signed", "uid": "uid-bench", "generation": 1, "resourceVersion": "1",
                "spec": {"images": [{"glob": "**"}], "authorities": [{"key": {"data": key}, "ctlog": {}}]}}],
}))
PY
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -keyout tls.key -out tls.crt -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null
HTTPS=$(free_port)
METRICS=$(free_port)
cd - >/dev/null
target/release/sigil-webhook --listen "127.0.0.1:$HTTPS" --metrics-listen "127.0.0.1:$METRICS" \
  --tls-cert "$dir/tls.crt" --tls-key "$dir/tls.key" --policy-snapshot-file "$dir/snapshot.json" \
  --insecure-registry "$REG" --allow-registry-address 127.0.0.0/8 >"$dir/webhook.log" 2>&1 &
wpid=$!
pids+=("$wpid")
wait_http "http://127.0.0.1:$METRICS/readyz"

python3 - "$REG" "$HTTPS" "$METRICS" "$wpid" "$dir/digests" "$dir/tls.crt" <<'PY'
import http.client, json, os, ssl, sys, time, urllib.request
reg, port, mport, pid, digests, ca = sys.argv[1:7]
digests = open(digests).read().split()
def cpu_ms():
    # Nanosecond CPU time of every thread (schedstat), not /proc/PID/stat's 10 ms ticks.
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e6
def registry_requests():
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
    total, by_status = 0, {}
    for line in text.splitlines():
        if line.startswith("sigil_registry_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            status = labels.split('status="')[1].split('"')[0]
            by_status[status] = by_status.get(status, 0) + int(float(value))
            total += int(float(value))
    return total, by_status
ctx = ssl.create_default_context(cafile=ca)
conn = http.client.HTTPSConnection("127.0.0.1", int(port), context=ctx, timeout=15)
def review(i, d):
    body = json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {
        "uid": f"u{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": f"p{i}", "namespace": "bench", "operation": "CREATE", "userInfo": {"username": "bench"},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "bench"},
                   "spec": {"containers": [{"name": "app", "image": f"{reg}/bench/app@{d}"}]}}}})
    t = time.perf_counter()
    conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    took = time.perf_counter() - t
    if not answer["response"]["allowed"]:
        sys.exit(f"denied: {answer['response'].get('status')}")
    return took
def run(label):
    c0, r0 = cpu_ms(), registry_requests()[0]
    t0 = time.perf_counter()
    lat = sorted(review(i, d) for i, d in enumerate(digests))
    wall = time.perf_counter() - t0
    c1, (r1, by_status) = cpu_ms(), registry_requests()
    n = len(digests)
    print(f"{label}: {n} reviews, {n / wall:.0f} reviews/s, p50 {lat[n // 2] * 1000:.2f} ms, "
          f"max {lat[-1] * 1000:.2f} ms; webhook CPU {(c1 - c0) / n:.2f} ms/review; "
          f"registry round trips {(r1 - r0) / n:.2f}/image (all so far by status: {by_status})")
    return (r1 - r0) / n, (c1 - c0) / n
trips, cpu = run("cold (every digest new)")
run("warm (verdicts cached)")
if trips > 4 or cpu > 2:
    sys.exit(f"cold admission over target: {trips:.2f} round trips, {cpu:.2f} ms CPU per image")
PY
