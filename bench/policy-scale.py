#!/usr/bin/env python3
"""Policies by the thousand, run by bench/policy-scale.sh.

Applies ClusterImagePolicies in steps (cumulative: 10, then 90 more to 100,
...) against the local control plane with sigil-controller and sigil-webhook
running as host processes, and for each step measures:

- apply: the time `kubectl apply --server-side` took;
- enforced: from the start of the apply until the webhook's
  sigil_policy_snapshot_revision reaches the first revision of the snapshot
  Secret that holds every policy applied so far;
- the snapshot at that revision: JSON bytes, stored (gzip) bytes, Secrets;
- controller and webhook RSS (VmRSS) once enforced;
- webhook reload: `load_ms` of its "policy snapshot in force" log line for
  that revision (reading the Secrets, validating, compiling);
- p50/p99 of /validate for a Pod whose image only policy `bench-target`
  (static pass) matches, each review with a new digest (no verdict cache).

With --namespaced, policy i is instead ImagePolicy `images` in its own
namespace `team-i` (the namespaces are created first): a thousand
namespaces each holding a policy. The Pod of the admission figure is then
admitted in `team-0`, where an ImagePolicy `bench-target` (static pass)
selects its image besides the cluster's `bench-target`.

Policies have the four shapes of crates/sigil-api/tests/snapshot_scale.rs:
40% key, 30% keyless against one of ten TrustRoots, 15% keyless with a Rego
attestation, 15% key with a CUE attestation, each with its own key text.

Usage: policy-scale.py --work DIR --webhook URL --metrics URL --counts 10,100
       --out FILE [--step-timeout SECONDS] [--namespaced]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import http.client
import json
import os
import random
import re
import ssl
import subprocess
import sys
import time
import urllib.request

NS = os.environ.get("SIGIL_NS", "sigil-system")
MAIN = "sigil-policy-snapshot"
EXAMPLE_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "examples",
                            "keyless-custom-trustroot.yaml")

REGO = """package sigstore
import rego.v1

default isCompliant := false

isCompliant if {
  input.predicate.runDetails.builder.id == "https://github.com/actions/runner/github-hosted"
  input.predicate.buildDefinition.externalParameters.workflow.ref == "refs/heads/main"
  input.predicate.buildDefinition.externalParameters.workflow.repository == "https://github.com/example/team-TEAM"
}
"""

CUE = """predicateType: "https://cosign.sigstore.dev/attestation/vuln/v1"
predicate: {
  scanner: {
    uri: =~"^pkg:github/aquasecurity/trivy"
  }
  metadata: scanFinishedOn: =~"^2026-"
}
"""


def log(msg: str) -> None:
    print(f"policy-scale: {msg}", file=sys.stderr, flush=True)


def kubectl(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {out.stderr.strip()[:500]}")
    return out.stdout


def p256_pem(rng: random.Random) -> str:
    """A real P-256 public key (the controller compiles each one)."""
    key = subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout"],
                         capture_output=True, check=True).stdout
    pub = subprocess.run(["openssl", "ec", "-pubout"], input=key, capture_output=True, check=True).stdout
    return pub.decode()


def trust_roots() -> list[dict]:
    """Ten TrustRoots with the example's material (a valid private Sigstore)."""
    docs = [d for d in _yaml_docs(EXAMPLE_ROOT) if d.get("kind") == "TrustRoot"]
    spec = docs[0]["spec"]
    return [{"apiVersion": "policy.sigil.dev/v1alpha1", "kind": "TrustRoot",
             "metadata": {"name": f"corp-{n}"}, "spec": spec} for n in range(10)]


def _yaml_docs(path: str) -> list[dict]:
    import yaml  # PyYAML, as bench/test.sh needs
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def policy(i: int, keys: list[str]) -> dict:
    root = f"corp-{i % 10}"
    identity = {"issuer": "https://token.actions.githubusercontent.com",
                "subjectRegExp": f"^https://github\\.com/example/team-{i}/\\.github/workflows/release\\.yml@refs/tags/v.*$"}
    kind = i % 20
    if kind < 8:
        authority = {"name": "release-key", "key": {"data": keys[i % len(keys)], "hashAlgorithm": "sha256"}}
    elif kind < 14:
        authority = {"name": "ci", "keyless": {"trustRootRef": root, "identities": [identity]},
                     "ctlog": {"trustRootRef": root}}
    elif kind < 17:
        authority = {"name": "provenance", "keyless": {"trustRootRef": root, "identities": [identity]},
                     "ctlog": {"trustRootRef": root},
                     "attestations": [{"name": "slsa", "predicateType": "slsaprovenance1",
                                       "policy": {"type": "rego", "data": REGO.replace("TEAM", str(i))}}]}
    else:
        authority = {"name": "scan", "key": {"data": keys[i % len(keys)]},
                     "attestations": [{"name": "vuln", "predicateType": "vuln",
                                       "policy": {"type": "cue", "data": CUE}}]}
    return {"apiVersion": "policy.sigil.dev/v1alpha1", "kind": "ClusterImagePolicy",
            "metadata": {"name": f"team-{i}-images"},
            "spec": {"images": [{"glob": f"registry.example.com/team-{i}/**"}], "authorities": [authority]}}


def namespaced(doc: dict, i: int) -> dict:
    """`doc` as ImagePolicy `images` of namespace `team-i`."""
    return {**doc, "kind": "ImagePolicy", "metadata": {"name": "images", "namespace": f"team-{i}"}}


def namespace(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{i}"}}


def key(p: dict) -> str:
    """A snapshot policy's name as the judge names it."""
    return f"{p['namespace']}/{p['name']}" if p.get("namespace") else p["name"]


TARGET = {"apiVersion": "policy.sigil.dev/v1alpha1", "kind": "ClusterImagePolicy",
          "metadata": {"name": "bench-target"},
          "spec": {"images": [{"glob": "bench.example.com/target/**"}],
                   "authorities": [{"name": "pass", "static": {"action": "pass"}}]}}


def apply(objects: list[dict]) -> float:
    start = time.monotonic()
    for k in range(0, len(objects), 500):
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects[k:k + 500]})
        kubectl("apply", "--server-side", "--field-manager=policy-scale", "-f", "-", stdin=body)
    return time.monotonic() - start


def secret_data(name: str) -> dict | None:
    try:
        obj = json.loads(kubectl("-n", NS, "get", "secret", name, "-o", "json"))
    except RuntimeError:
        return None
    return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}


def stored_snapshot() -> tuple[dict, int, int, int] | None:
    """(snapshot, JSON bytes, stored bytes, Secrets) as the webhook reads it."""
    main = secret_data(MAIN)
    if not main:
        return None
    if "manifest.json" not in main:
        raw = main.get("snapshot.json", b"")
        return json.loads(raw), len(raw), len(raw), 1
    manifest = json.loads(main["manifest.json"])
    chunks = [main["snapshot.json.gz"]]
    for c in manifest["chunks"][1:]:
        shard = secret_data(c["secret"]) or {}
        chunks.append(shard.get("snapshot.json.gz", b""))
    for c, piece in zip(manifest["chunks"], chunks):
        if hashlib.sha256(piece).hexdigest() != c["sha256"]:
            return None  # mid-write: read again
    stored = b"".join(chunks)
    raw = gzip.decompress(stored)
    return json.loads(raw), len(raw), len(stored), len(chunks)


def webhook_revision(metrics: str) -> int:
    """The revision the webhook enforces; -1 while it does not answer."""
    try:
        with urllib.request.urlopen(f"{metrics}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError as e:  # a timeout too: the caller's deadline bounds the wait
        log(f"webhook metrics: {e}")
        return -1
    m = re.search(r"^sigil_policy_snapshot_revision\S*\s+(-?\d+)", text, re.M)
    return int(m.group(1)) if m else -1


def rss_kib(pid_file: str) -> int | None:
    try:
        pid = open(pid_file).read().strip()
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reload_ms(log_file: str, revision: int, wait_s: float = 10.0) -> int | None:
    """`load_ms` of the first snapshot the webhook put in force at or after
    `revision`. The webhook's metric moves before its log line is written
    (the snapshot compiles on the blocking pool, the line follows on the
    runtime), so the log is read again for up to `wait_s` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        with open(log_file, errors="replace") as f:
            for line in f:
                line = re.sub(r"\x1b\[[0-9;]*m", "", line)  # the text log's colours
                if "policy snapshot in force" not in line:
                    continue
                r = re.search(r"\brevision=(\d+)", line)
                m = re.search(r"\bload_ms=(\d+)", line)
                if r and m and int(r.group(1)) >= revision:
                    return int(m.group(1))
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def review(uid: str, digest: str, ns: str) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"bench-{uid[:8]}", "namespace": ns},
           "spec": {"containers": [{"name": "app", "image": f"bench.example.com/target/app@sha256:{digest}"}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "resource": {"group": "", "version": "v1", "resource": "pods"},
                                   "namespace": ns, "operation": "CREATE", "object": pod,
                                   "userInfo": {"username": "bench"}, "dryRun": False}}).encode()


def latency(webhook: str, ca: str, n: int, ns: str) -> dict:
    host, port = webhook.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    times, denied = [], 0
    for k in range(n):
        body = review(f"{k:08x}-0000-4000-8000-000000000000", hashlib.sha256(os.urandom(16)).hexdigest(), ns)
        start = time.perf_counter()
        conn.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        times.append((time.perf_counter() - start) * 1000)
        if not answer.get("response", {}).get("allowed"):
            denied += 1
            if denied == 1:
                log(f"review denied: {json.dumps(answer.get('response'))[:300]}")
    times.sort()
    return {"n": n, "p50_ms": times[n // 2], "p99_ms": times[min(n - 1, (n * 99) // 100)],
            "max_ms": times[-1], "denied": denied}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--webhook", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--counts", default="10,100,1000,10000")
    ap.add_argument("--out", required=True)
    ap.add_argument("--step-timeout", type=float, default=900)
    ap.add_argument("--reviews", type=int, default=300)
    ap.add_argument("--namespaced", action="store_true")
    args = ap.parse_args()
    rng = random.Random(26)
    results = {"counts": [], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "namespaced": args.namespaced}
    target_ns = "team-0" if args.namespaced else "default"
    log("applying ten TrustRoots")
    apply(trust_roots())
    keys = [p256_pem(rng) for _ in range(200)]
    done = 0
    for count in [int(c) for c in args.counts.split(",")]:
        objects = [policy(i, keys) for i in range(done, count)]
        if args.namespaced:
            apply([namespace(i) for i in range(done, count)])
            objects = [namespaced(doc, i) for doc, i in zip(objects, range(done, count))]
            want = {f"team-{i}/images" for i in range(count)} | {"bench-target", "team-0/bench-target"}
        else:
            want = {f"team-{i}-images" for i in range(count)} | {"bench-target"}
        if done == 0:
            objects.append(TARGET)
            if args.namespaced:
                objects.append({**TARGET, "kind": "ImagePolicy",
                                "metadata": {"name": "bench-target", "namespace": "team-0"}})
        log(f"{count}: applying {len(objects)} policies")
        start = time.monotonic()
        took_apply = apply(objects)
        done = count
        revision, snap, last = None, None, None
        deadline = start + args.step_timeout
        while time.monotonic() < deadline:
            got = stored_snapshot()
            last = got or last
            if got and want <= {key(p) for p in got[0]["policies"]}:
                revision, snap = got[0]["revision"], got
                break
            time.sleep(1)
        row = {"policies": count, "apply_s": round(took_apply, 1)}
        if revision is None:
            row["timeout"] = f"the snapshot did not hold all {count} policies within {args.step_timeout:.0f} s"
            if last:
                row["reached"] = {"revision": last[0]["revision"], "policies": len(last[0]["policies"]),
                                  "json_bytes": last[1], "stored_bytes": last[2], "secrets": last[3]}
            log(row["timeout"])
            results["counts"].append(row)
            break
        while time.monotonic() < deadline and webhook_revision(args.metrics) < revision:
            time.sleep(0.1)
        enforced = time.monotonic() - start
        row.update({
            "enforced_s": round(enforced, 1), "revision": revision,
            "json_bytes": snap[1], "stored_bytes": snap[2], "secrets": snap[3],
            "controller_rss_kib": rss_kib(os.path.join(args.work, "controller.pid")),
            "webhook_rss_kib": rss_kib(os.path.join(args.work, "webhook.pid")),
            "webhook_reload_ms": reload_ms(os.path.join(args.work, "webhook.log"), revision),
        })
        if webhook_revision(args.metrics) < revision:
            row["timeout"] = f"the webhook did not load revision {revision} within {args.step_timeout:.0f} s"
        row["admission"] = latency(args.webhook, os.path.join(args.work, "tls", "ca.crt"), args.reviews,
                                   target_ns)
        log(json.dumps(row))
        results["counts"].append(row)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
