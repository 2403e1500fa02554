#!/usr/bin/env bash
# The benchmark's unit-level check, part of `make test-scripts` (no cluster,
# no registry, no peer build): the scripts parse, the peers' manifests render
# from their module sources with the images replaced and the offline
# settings in place, the policies render for all three, the load generator
# judges answers as it should, and the report renders from results, missing
# measures shown as missing.
# Needs: go (the peers' module sources, from the module cache or the Go module
# proxy), python3 with PyYAML, helm (scripts/install-tools.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Importing bench/admission-load.py must not leave bench/__pycache__ behind.
export PYTHONDONTWRITEBYTECODE=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sigil-bench-test.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT
fails=0
ok() { printf 'bench-test: ok: %s\n' "$*" >&2; }
fail() { printf 'bench-test: FAIL: %s\n' "$*" >&2; fails=$((fails + 1)); }

for f in bench/*.sh bench/peers/*.sh; do
    bash -n "$f" || fail "$f does not parse"
done
python3 -c 'import sys
for f in sys.argv[1:]:
    compile(open(f).read(), f, "exec")' bench/*.py 2>"$WORK/py.err" || { cat "$WORK/py.err" >&2; fail "a bench/*.py does not compile"; }
ok "the scripts parse"

# The policy differential's corpus: sigil's own edge-case policies render,
# the corpus and its reasons are consistent, a TrustRoot and the report
# render (bench/policy-differential.py --check; no registry, no peer build).
if python3 bench/policy-differential.py --check; then
    ok "the policy differential's corpus renders"
else
    fail "bench/policy-differential.py --check failed"
fi
# The Kyverno conversion differential's corpus: every Kyverno policy renders
# on made-up registries and keys, the reasons name pairs of the corpus, and
# the report renders (bench/kyverno-differential.py --check).
if python3 bench/kyverno-differential.py --check; then
    ok "the Kyverno differential's corpus renders"
else
    fail "bench/kyverno-differential.py --check failed"
fi

DIGEST=sha256:$(printf '%064d' 7)
REG=10.244.0.1:5000

# policy-controller's config/, rendered and parsed.
if bench/peers/manifests.sh policy-controller "$REG/peers/policy-controller@$DIGEST" >"$WORK/pc.yaml"; then
    python3 - "$WORK/pc.yaml" "$REG/peers/policy-controller@$DIGEST" <<'PY' || fail "policy-controller's manifests are not as expected"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted({d["kind"] for d in docs})
deps = [d for d in docs if d["kind"] == "Deployment"]
assert len(deps) == 1, f"want one Deployment, got {len(deps)}"
c = deps[0]["spec"]["template"]["spec"]["containers"][0]
assert c["image"] == sys.argv[2], c["image"]
assert "--disable-tuf" in c["args"], c["args"]
crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
assert "clusterimagepolicies.policy.sigstore.dev" in crds, crds
hooks = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
assert hooks, "no ValidatingWebhookConfiguration"
assert "ko://" not in open(sys.argv[1]).read()
print(f"bench-test: policy-controller: {len(docs)} objects ({', '.join(kinds)})", file=sys.stderr)
PY
    ok "policy-controller's manifests render"
else
    fail "bench/peers/manifests.sh policy-controller failed"
fi

# Kyverno's chart, rendered and parsed.
if bench/peers/manifests.sh kyverno "$REG/peers/kyverno@$DIGEST" "$REG/peers/kyvernopre@$DIGEST" >"$WORK/ky.yaml" 2>"$WORK/ky.err"; then
    python3 - "$WORK/ky.yaml" "$REG" "$DIGEST" <<'PY' || fail "Kyverno's manifests are not as expected"
import sys, yaml
path, reg, digest = sys.argv[1:4]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
deps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
assert list(deps) == ["kyverno-admission-controller"], list(deps)
spec = deps["kyverno-admission-controller"]["spec"]["template"]["spec"]
images = [c["image"] for c in spec["initContainers"] + spec["containers"]]
assert images == [f"{reg}/peers/kyvernopre:v1.19.1@{digest}", f"{reg}/peers/kyverno:v1.19.1@{digest}"], images
args = spec["containers"][0]["args"]
assert "--allowInsecureRegistry=true" in args and "--registryCredentialHelpers=default" in args, args
crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
for want in ("clusterpolicies.kyverno.io", "imagevalidatingpolicies.policies.kyverno.io"):
    assert want in crds, f"no CRD {want}"
assert not [d for d in docs if "helm.sh/hook" in (d.get("metadata", {}).get("annotations") or {})], "a helm hook was rendered"
print(f"bench-test: kyverno: {len(docs)} objects, {len(crds)} CRDs", file=sys.stderr)
PY
    ok "Kyverno's chart renders"
else
    cat "$WORK/ky.err" >&2
    fail "bench/peers/manifests.sh kyverno failed"
fi
bench/peers/manifests.sh policy-controller "not-a-digest" >/dev/null 2>&1 &&
    fail "manifests.sh took an image that is not pinned by digest"

# The policies, for a generated key.
before=$fails
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl ec -pubout -out "$WORK/key.pub" 2>/dev/null
for peer in sigil policy-controller kyverno kyverno-ivpol; do
    if python3 bench/render-policy.py "bench/policies/$peer.yaml" "$REG" "$WORK/key.pub" >"$WORK/policy-$peer.yaml"; then
        python3 - "$WORK/policy-$peer.yaml" "$WORK/key.pub" "$REG" "$peer" <<'PY' || fail "the $peer policy is not as expected"
import sys, yaml
path, key, reg, peer = sys.argv[1:5]
doc = yaml.safe_load(open(path))
pem = open(key).read().strip()
if peer == "kyverno":
    verify = doc["spec"]["rules"][0]["verifyImages"][0]
    assert verify["imageReferences"] == [f"{reg}/bench/*"], verify["imageReferences"]
    assert verify["attestors"][0]["entries"][0]["keys"]["publicKeys"].strip() == pem
elif peer == "kyverno-ivpol":
    spec = doc["spec"]
    assert (doc["apiVersion"], doc["kind"]) == ("policies.kyverno.io/v1", "ImageValidatingPolicy"), doc["kind"]
    assert spec["matchImageReferences"] == [{"glob": f"{reg}/bench/**"}], spec["matchImageReferences"]
    assert spec["attestors"][0]["cosign"]["key"]["data"].strip() == pem
    assert spec["validationActions"] == ["Deny"] and spec["failurePolicy"] == "Fail", spec
    assert "verifyImageSignatures(image, [attestors.cosign])" in spec["validations"][0]["expression"]
else:
    assert doc["spec"]["images"] == [{"glob": f"{reg}/bench/**"}], doc["spec"]["images"]
    assert doc["spec"]["authorities"][0]["key"]["data"].strip() == pem
PY
    else
        fail "bench/render-policy.py bench/policies/$peer.yaml failed"
    fi
done
((fails > before)) || ok "the policies render"

# The load generator's judgement of API server answers.
before=$fails
python3 - <<'PY' || fail "admission-load.py judges answers wrongly"
import importlib.util, json, re, sys
spec = importlib.util.spec_from_file_location("admission_load", "bench/admission-load.py")
m = importlib.util.module_from_spec(spec)
sys.modules["admission_load"] = m  # dataclasses look their module up
spec.loader.exec_module(m)
by = re.compile(r'admission webhook "(?:policy\.sigstore\.dev)" denied the request')
def body(msg):
    return json.dumps({"kind": "Status", "message": msg}).encode()
signed, unsigned = m.Target("r/s@x", True), m.Target("r/u@y", False)
denial = body('admission webhook "policy.sigstore.dev" denied the request: validation failed: no signatures')
failure = body('Internal error occurred: failed calling webhook "policy.sigstore.dev": context deadline exceeded')
other = body('admission webhook "someone.else" denied the request: no')
cases = [
    (signed, 201, b"{}", "correct"), (unsigned, 403, denial, "correct"),
    (signed, 403, denial, "wrong"), (unsigned, 201, b"{}", "wrong"),
    (signed, 500, failure, "failed"), (unsigned, 500, failure, "failed"),
    (unsigned, 403, other, "failed"), (unsigned, 403, b"not json", "failed"),
]
for target, status, b, want in cases:
    got, _ = m.judge(target, status, b, by)
    assert got == want, (target, status, b, got, want)
assert m.percentile([], 50) is None
values = sorted(float(v) for v in range(1, 101))
assert (m.percentile(values, 50), m.percentile(values, 99), m.percentile(values, 100)) == (50.0, 99.0, 100.0)
s = m.summary([m.Result(True, 10.0, "correct"), m.Result(False, 30.0, "wrong", "x")], 2.0)
assert (s["admissions"], s["correct"], s["wrong"], s["per_second"]) == (2, 1, 1, 1.0), s
assert s["latency_ms_unsigned"]["p50"] == 30.0 and s["examples"] == ["x"], s
assert s["latency_ms_all"]["mean"] == 20.0 and s["timeouts"] == 0, s
# A webhook the API server gave up on, and no answer at all, are timeouts;
# another failure is not.
s = m.summary([m.Result(True, 10000.0, "failed", "", 0.0, 500,
                        'failed calling webhook "w": context deadline exceeded'),
               m.Result(True, 40000.0, "failed", "", 0.0, 0, "timed out"),
               m.Result(False, 5.0, "failed", "", 0.0, 403, 'admission webhook "other" denied the request')], 1.0)
assert (s["failed"], s["timeouts"]) == (3, 2), s
PY
((fails > before)) || ok "the load generator judges answers"

# The outage analysis, on a trace: before, during (100..110) and after.
before=$fails
cat >"$WORK/outage.trace" <<'TRACE'
{"started": 99.0, "signed": true, "ms": 10, "verdict": "correct", "status": 201, "message": ""}
{"started": 101.0, "signed": true, "ms": 10, "verdict": "wrong", "status": 403, "message": "admission webhook \"w\" denied the request: registry 503"}
{"started": 102.0, "signed": false, "ms": 10, "verdict": "failed", "status": 500, "message": "failed calling webhook"}
{"started": 103.0, "signed": false, "ms": 10, "verdict": "wrong", "status": 201, "message": ""}
{"started": 110.5, "signed": true, "ms": 10, "verdict": "wrong", "status": 403, "message": "still down"}
{"started": 111.0, "signed": true, "ms": 500, "verdict": "correct", "status": 201, "message": ""}
TRACE
if python3 bench/outage.py "$WORK/outage.trace" 100 110 >"$WORK/outage.json"; then
    python3 - "$WORK/outage.json" <<'PY' || fail "bench/outage.py analyses the trace wrongly"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["requests_during"] == 3, o
assert (o["signed_admitted"], o["signed_denied"], o["signed_failed"]) == (0, 1, 0), o
assert (o["unsigned_admitted"], o["unsigned_denied"], o["unsigned_failed"]) == (1, 0, 1), o
assert o["unsigned_admitted_total"] == 1 and o["recovery_s"] == 1.5, o
assert len(o["answers_during"]) == 2, o
PY
else
    fail "bench/outage.py failed"
fi
((fails > before)) || ok "the outage analysis"

# The webhook replicas' metrics between two scrapes: a Pod that started in
# between counts from zero, one that went away is named.
before=$fails
mkdir -p "$WORK/m0" "$WORK/m1"
cat >"$WORK/m0/w-a" <<'PROM'
# TYPE sigil_admission_requests counter
sigil_admission_requests_total{endpoint="validate",operation="CREATE",kind="Pod",decision="allowed"} 10
sigil_admission_requests_total{endpoint="mutate",operation="CREATE",kind="Pod",decision="patched"} 10
sigil_webhook_connections_total 2
sigil_verification_duration_seconds_sum 1.5
sigil_verification_duration_seconds_count 3
PROM
echo 'sigil_admission_requests_total{endpoint="validate"} 4' >"$WORK/m0/w-gone"
cat >"$WORK/m1/w-a" <<'PROM'
sigil_admission_requests_total{endpoint="validate",operation="CREATE",kind="Pod",decision="allowed"} 40
sigil_admission_requests_total{endpoint="mutate",operation="CREATE",kind="Pod",decision="patched"} 40
sigil_webhook_connections_total 3
sigil_verification_duration_seconds_sum 2.5
sigil_verification_duration_seconds_count 5
sigil_registry_request_duration_seconds_sum 0.3
sigil_registry_request_duration_seconds_count 6
PROM
cat >"$WORK/m1/w-b" <<'PROM'
sigil_admission_requests_total{endpoint="validate",operation="CREATE",kind="Pod",decision="denied"} 20
sigil_webhook_connections_total 1
PROM
if python3 bench/webhook-metrics.py "$WORK/m0" "$WORK/m1" >"$WORK/m.json"; then
    python3 - "$WORK/m.json" <<'PY' || fail "bench/webhook-metrics.py counts wrongly"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["pods"]["w-a"]["reviews"] == 60 and m["pods"]["w-b"]["reviews"] == 20, m
assert m["total"]["reviews"] == 80 and m["total"]["connections"] == 2, m
assert m["total"]["verifications"] == 2 and m["total"]["verification_s"] == 1.0, m
assert m["total"]["registry_requests"] == 6 and m["total"]["registry_wait_s"] == 0.3, m
assert m["shares"] == {"w-a": 0.75, "w-b": 0.25} and m["smallest_share"] == 0.25, m
assert m["gone"] == ["w-gone"], m
PY
else
    fail "bench/webhook-metrics.py failed"
fi
((fails > before)) || ok "the webhook replicas' metrics"

# The proxy's added latency: the file's milliseconds, bounded, none without it.
before=$fails
python3 - "$WORK" <<'PY' || fail "counting-proxy.py reads its latency file wrongly"
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("counting_proxy", "bench/counting-proxy.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
f = os.path.join(sys.argv[1], "latency")
assert m.latency_s(None) == 0.0 and m.latency_s(f) == 0.0
for text, want in (("50\n", 0.05), ("0", 0.0), ("-3", 0.0), ("999999", 10.0), ("fifty", 0.0)):
    open(f, "w").write(text)
    assert m.latency_s(f) == want, (text, m.latency_s(f))
PY
((fails > before)) || ok "the proxy's latency"

# The report, from a results directory with one peer measured and one missing.
before=$fails
mkdir -p "$WORK/results/sigil"
cat >"$WORK/results/run.json" <<'EOF'
{"images": 2, "concurrency": 1, "duration_s": 1, "peers": ["sigil", "kyverno"], "kernel": "k", "cpus": 2,
 "cpu_model": "cpu", "memory_bytes": 1048576, "loadavg_at_end": "1 1 1", "sigil_commit": "abc",
 "kubernetes": "v1.37.2", "date": "2026-01-01T00:00:00Z", "storms": [100], "storm_latency_ms": 50}
EOF
echo '{"sigil": {"compressed": 2097152, "unpacked": 4194304}}' >"$WORK/results/images.json"
echo '{"admissions": 4, "correct": 4, "wrong": 0, "failed": 0, "registry_requests": 12, "cpu_ns": 2000000000,
  "latency_ms_all": {"n": 4, "p50": 12.5, "p99": 40.0}, "examples": []}' >"$WORK/results/sigil/cold.json"
echo '{"admissions": 100, "correct": 100, "wrong": 0, "failed": 0, "timeouts": 0, "window_s": 2, "start_late_ms_max": 12.0, "images": 100,
  "registry_requests": 250, "cpu_ns": 300000000, "latency_ms_all": {"n": 100, "p50": 400.0, "p99": 900.0, "max": 950.0,
  "mean": 450.0}, "examples": [],
  "webhook": {"total": {"reviews": 200, "connections": 4, "verifications": 100, "verification_s": 30.0,
  "registry_requests": 250, "registry_wait_s": 15.0}}}' >"$WORK/results/sigil/storm-100.json"
echo '{"replicas": 3, "runs": [{"routing": "default", "connections": "kept", "load": "saturated", "admissions": 90,
  "failed": 0, "wrong": 0, "per_second": 45.0, "webhook": {"total": {"reviews": 180, "connections": 8},
  "shares": {"a": 0.9, "b": 0.05, "c": 0.05}, "smallest_share": 0.05}}]}' >"$WORK/results/sigil/shares.json"
if SIGIL_PEERS_DIR=$WORK/none python3 bench/report.py "$WORK/results" >"$WORK/report.md"; then
    grep -q '| sigil | 100 | 2 s | 0.0 s | 400 / 900 / 950 | 0 | 0 | 0 | 2.50 | 3.0 ms |' "$WORK/report.md" ||
        fail "the report's storm row is wrong"
    grep -q '| Kyverno v1.19.1 ClusterPolicy | 100 | not measured |' "$WORK/report.md" ||
        fail "the report does not say a peer's storm is not measured"
    # 450 ms mean, 300 ms judged per image, 2.5 requests of 60 ms each.
    grep -q '| 100 | 450 ms | 100 | 300 ms | 2.50 | 60 ms | 150 ms | 150 ms |' "$WORK/report.md" ||
        fail "the report's storm breakdown is wrong"
    grep -q '| default | kept | saturated | 45.0 | 180 | 90% / 5% / 5% | 5% | 8 | 0 | 0 |' "$WORK/report.md" ||
        fail "the report's replica shares are wrong"
    grep -q '| sigil | 12.5 (1.0x) | 40.0 (1.0x) |' "$WORK/report.md" || fail "the report lacks sigil's cold latency row"
    grep -q '| sigil | 500.00 s | not measured |' "$WORK/report.md" || fail "the report's CPU per 1,000 admissions is wrong"
    grep -q '| sigil | 3.00 | not measured |' "$WORK/report.md" || fail "the report's registry requests per image are wrong"
    grep -q '| Kyverno v1.19.1 ClusterPolicy | not measured | not measured |' "$WORK/report.md" || fail "the report does not say a missing peer is not measured"
    grep -q '2,097,152 bytes (2.0 MiB)' "$WORK/report.md" || fail "the report lacks sigil's image size"
else
    fail "bench/report.py failed"
fi
((fails > before)) || ok "the report renders"

((fails == 0)) || { printf 'bench-test: %d failed\n' "$fails" >&2; exit 1; }
printf 'bench-test: all passed\n' >&2
