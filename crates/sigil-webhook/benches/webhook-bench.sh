#!/usr/bin/env bash
# sigil-webhook numbers: start-to-ready and idle RSS of the release binary
# (static key policy, embedded public-good trust root, no network), then the
# in-process warm TLS load run and the 100k-verdict cache fill
# (benches/admission_load.rs). Every wait below is bounded.
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release -q -p sigil-webhook
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -keyout "$dir/tls.key" -out "$dir/tls.crt" -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 2>/dev/null
openssl ecparam -genkey -name prime256v1 -noout 2>/dev/null | openssl ec -pubout -out "$dir/cosign.pub" 2>/dev/null
start=$(date +%s%N)
target/release/sigil-webhook --listen 127.0.0.1:18443 --metrics-listen 127.0.0.1:19090 \
  --tls-cert "$dir/tls.crt" --tls-key "$dir/tls.key" --key "$dir/cosign.pub" >"$dir/log" 2>&1 &
pid=$!
ready=
for _ in $(seq 1 400); do
  if curl -fsS -o /dev/null http://127.0.0.1:19090/readyz 2>/dev/null; then ready=$(( ($(date +%s%N) - start) / 1000000 )); break; fi
  sleep 0.005
done
[ -n "$ready" ] || { cat "$dir/log"; echo "not ready within 2s" >&2; exit 1; }
curl -fsS -o /dev/null --cacert "$dir/tls.crt" https://127.0.0.1:18443/healthz
sleep 2
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
echo "start to ready: ${ready} ms; idle RSS: $((rss / 1024)) MiB ($rss kB)"
kill -TERM "$pid"
timeout 30 tail --pid="$pid" -f /dev/null || true
pid=
cargo bench -q -p sigil-webhook --bench admission_load
