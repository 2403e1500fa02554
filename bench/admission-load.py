#!/usr/bin/env python3
"""Admission load for the side-by-side benchmark (bench/cluster.sh).

Creates Pods with server-side dry run (admission runs in full, nothing is
stored) through the API server, each Pod running one image that the policy
under test must admit (signed) or deny (unsigned), and judges and times every
answer. The admission controller is whichever is installed: sigil,
policy-controller or Kyverno; what a denial by it looks like is given by
--denied-by (the webhook names the API server quotes in its message).

Three modes:
  sequence  each image once, in the given order, one request at a time: the
            latency of each admission (cold on first sight of a digest,
            warm when repeated)
  saturate  CONCURRENCY workers for DURATION seconds cycling over the images:
            throughput
  storm     each image once, the requests' starts spread evenly over WINDOW
            seconds whatever the answers take (open loop, up to 256 in
            flight): a rollout or a node pool bringing many new digests at once

Prints one JSON object: counts (admissions, correct, wrong, failed), latency
percentiles in milliseconds per expectation, admissions per second, and up
to ten examples of wrong or failed answers. Exit status 0 whatever the
verdicts: the caller decides what a wrong verdict means for its run.

Standard library only; the client certificate of the local cluster's admin
(its kubeconfig) authenticates.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import ssl
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

# A dry-run create waits on the webhook; the API server gives up on a webhook
# after its timeoutSeconds (at most 30), so this bounds a hung request.
REQUEST_TIMEOUT_S = 40


@dataclass
class Target:
    image: str
    expect_allowed: bool


@dataclass
class Result:
    expect_allowed: bool
    latency_ms: float
    verdict: str  # "correct", "wrong" or "failed"
    detail: str = ""
    started: float = 0.0  # unix time the request was sent
    status: int = 0  # the API server's HTTP status, 0 for no answer
    message: str = ""
    late_ms: float = 0.0  # storm: how long after its slot the request was sent


@dataclass
class Client:
    """One keep-alive HTTPS connection to the API server."""

    host: str
    port: int
    context: ssl.SSLContext
    path: str
    conn: http.client.HTTPSConnection | None = field(default=None)

    def post(self, body: bytes) -> tuple[int, bytes]:
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(
                    self.host, self.port, context=self.context, timeout=REQUEST_TIMEOUT_S)
            try:
                self.conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, ConnectionError) as e:
                # A connection the server closed while idle: reconnect once.
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise e
        raise AssertionError("unreachable")


def pod(image: str, n: int) -> bytes:
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"bench-{n}-"},
        "spec": {"containers": [{"name": "c", "image": image}]},
    }).encode()


def message_of(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return body[:300].decode(errors="replace")


def judge(target: Target, status: int, body: bytes, denied_by: re.Pattern[str]) -> tuple[str, str]:
    message = message_of(body)
    allowed = status == 201
    # The API server words a webhook's denial as
    #   admission webhook "NAME" denied the request: REASON
    # and a failure to call it as 'failed calling webhook "NAME"'.
    denied = status in (400, 403, 422) and denied_by.search(message) is not None
    if target.expect_allowed and allowed or not target.expect_allowed and denied:
        return "correct", ""
    if target.expect_allowed and denied:
        return "wrong", f"signed {target.image} denied: {message[:300]}"
    if not target.expect_allowed and allowed:
        return "wrong", f"unsigned {target.image} admitted"
    return "failed", f"{target.image}: HTTP {status}: {message[:300]}"


def one(client: Client, target: Target, n: int, denied_by: re.Pattern[str]) -> Result:
    started = time.time()
    start = time.monotonic()
    try:
        status, body = client.post(pod(target.image, n))
    except (OSError, http.client.HTTPException) as e:
        return Result(target.expect_allowed, (time.monotonic() - start) * 1000, "failed",
                      f"{target.image}: no answer: {e}", started, 0, str(e))
    ms = (time.monotonic() - start) * 1000
    verdict, detail = judge(target, status, body, denied_by)
    return Result(target.expect_allowed, ms, verdict, detail, started, status, message_of(body)[:300])


STORM_WORKERS = 256


def storm(targets: list[Target], host: str, port: int, ctx: ssl.SSLContext, path: str,
          denied_by: re.Pattern[str], window: float) -> list[Result]:
    """Request n starts at n * window / len(targets) seconds, on the first idle
    worker; each worker has its own connection, opened before the first start."""
    workers = min(STORM_WORKERS, len(targets))
    clients = [Client(host, port, ctx, path) for _ in range(workers)]
    for c in clients:
        c.conn = http.client.HTTPSConnection(c.host, c.port, context=c.context, timeout=REQUEST_TIMEOUT_S)
        c.conn.connect()
    lock = threading.Lock()
    next_index = [0]
    results: list[Result] = []
    step = window / len(targets)
    start = time.monotonic() + 0.2

    def worker(client: Client) -> None:
        mine = []
        while True:
            with lock:
                n = next_index[0]
                next_index[0] += 1
            if n >= len(targets):
                break
            slot = start + n * step
            time.sleep(max(0.0, slot - time.monotonic()))
            late = max(0.0, time.monotonic() - slot) * 1000
            r = one(client, targets[n], n, denied_by)
            r.late_ms = late
            mine.append(r)
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def write_trace(path: str, results: list[Result]) -> None:
    """One JSON object a line per request, in the order they were sent."""
    with open(path, "w") as f:
        for r in sorted(results, key=lambda r: r.started):
            f.write(json.dumps({"started": round(r.started, 3), "signed": r.expect_allowed,
                                "ms": round(r.latency_ms, 2), "verdict": r.verdict,
                                "status": r.status, "message": r.message}) + "\n")


def percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    # Nearest rank: the smallest value with at least p% of values at or below it.
    rank = max(1, -(-len(sorted_values) * p // 100))
    return round(sorted_values[int(rank) - 1], 2)


# How the API server words a webhook it gave up on, or a request it cut.
TIMEOUT_WORDS = re.compile(r"deadline exceeded|timed? ?out|context canceled", re.I)


def summary(results: list[Result], seconds: float) -> dict:
    out: dict = {
        "admissions": len(results),
        "correct": sum(r.verdict == "correct" for r in results),
        "wrong": sum(r.verdict == "wrong" for r in results),
        "failed": sum(r.verdict == "failed" for r in results),
        # Failed answers that are timeouts (the webhook's, or no answer at all).
        "timeouts": sum(r.verdict == "failed" and (r.status == 0 or TIMEOUT_WORDS.search(r.message) is not None)
                        for r in results),
        "seconds": round(seconds, 3),
        "per_second": round(len(results) / seconds, 2) if seconds > 0 else None,
        "examples": [r.detail for r in results if r.verdict != "correct"][:10],
    }
    for name, subset in (("all", results),
                         ("signed", [r for r in results if r.expect_allowed]),
                         ("unsigned", [r for r in results if not r.expect_allowed])):
        lat = sorted(r.latency_ms for r in subset)
        out[f"latency_ms_{name}"] = {"n": len(lat), "p50": percentile(lat, 50),
                                     "p99": percentile(lat, 99),
                                     "max": round(lat[-1], 2) if lat else None,
                                     "mean": round(sum(lat) / len(lat), 2) if lat else None}
    return out


def load_targets(path: str) -> list[Target]:
    """Lines of `signed IMAGE` or `unsigned IMAGE`."""
    targets = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split()
            if not words:
                continue
            if len(words) != 2 or words[0] not in ("signed", "unsigned"):
                sys.exit(f"admission-load: {path}:{number}: want 'signed IMAGE' or 'unsigned IMAGE', got {line.strip()!r}")
            targets.append(Target(words[1], words[0] == "signed"))
    if not targets:
        sys.exit(f"admission-load: {path} names no images")
    return targets


def kubeconfig_client(path: str, namespace: str) -> tuple[str, int, ssl.SSLContext, str]:
    """Server, CA and client certificate of the kubeconfig local-cluster.sh writes
    (file references, one cluster, one user)."""
    text = open(path).read()

    def value(key: str) -> str:
        m = re.search(rf"^\s*{key}:\s*(\S+)\s*$", text, re.M)
        if not m:
            sys.exit(f"admission-load: {path} has no {key} (a kubeconfig from e2e/local-cluster.sh expected)")
        return m.group(1)

    server = urllib.parse.urlsplit(value("server"))
    if server.scheme != "https" or not server.hostname or not server.port:
        sys.exit(f"admission-load: {path}: server {server.geturl()} is not https://HOST:PORT")
    ctx = ssl.create_default_context(cafile=value("certificate-authority"))
    ctx.load_cert_chain(value("client-certificate"), value("client-key"))
    path_ = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods?dryRun=All"
    return server.hostname, server.port, ctx, path_


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["sequence", "saturate", "storm"])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--targets", required=True, help="file of 'signed IMAGE' / 'unsigned IMAGE' lines")
    p.add_argument("--denied-by", required=True,
                   help="regex matching the webhook name(s) whose denials are the policy's verdict")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--pace", type=float, default=0.0,
                   help="sequence: start a request at most every PACE milliseconds")
    p.add_argument("--window", type=float, default=5.0,
                   help="storm: seconds over which the requests start")
    p.add_argument("--trace", help="also write every request (time, expectation, answer) to this file")
    args = p.parse_args()
    if not 1 <= args.concurrency <= 256:
        sys.exit("admission-load: --concurrency must be 1..256")
    if not 0 < args.duration <= 3600:
        sys.exit("admission-load: --duration must be in (0, 3600] seconds")
    if not 0 <= args.pace <= 60000:
        sys.exit("admission-load: --pace must be 0..60000 ms")
    if not 0 < args.window <= 600:
        sys.exit("admission-load: --window must be in (0, 600] seconds")

    denied_by = re.compile(r'admission webhook "(?:' + args.denied_by + r')" denied the request')
    host, port, ctx, path = kubeconfig_client(args.kubeconfig, args.namespace)
    targets = load_targets(args.targets)

    if args.mode == "sequence":
        client = Client(host, port, ctx, path)
        start = time.monotonic()
        results = []
        for n, t in enumerate(targets):
            if args.pace:
                # Paced: the n-th request starts no earlier than n * pace.
                time.sleep(max(0.0, start + n * args.pace / 1000 - time.monotonic()))
            results.append(one(client, t, n, denied_by))
        if args.trace:
            write_trace(args.trace, results)
        print(json.dumps(summary(results, time.monotonic() - start)))
        return

    if args.mode == "storm":
        results = storm(targets, host, port, ctx, path, denied_by, args.window)
        if args.trace:
            write_trace(args.trace, results)
        out = summary(results, max(r.started for r in results) + max(r.latency_ms for r in results) / 1000
                      - min(r.started for r in results))
        # How far behind its slot the latest request started (all workers busy).
        out["window_s"] = args.window
        out["start_late_ms_max"] = round(max(r.late_ms for r in results), 1)
        print(json.dumps(out))
        return

    results: list[Result] = []
    lock = threading.Lock()
    next_index = [0]
    deadline = time.monotonic() + args.duration

    def worker() -> None:
        client = Client(host, port, ctx, path)
        mine = []
        while time.monotonic() < deadline:
            with lock:
                n = next_index[0]
                next_index[0] += 1
            mine.append(one(client, targets[n % len(targets)], n, denied_by))
        with lock:
            results.extend(mine)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if args.trace:
        write_trace(args.trace, results)
    print(json.dumps(summary(results, time.monotonic() - start)))


if __name__ == "__main__":
    main()
