#!/usr/bin/env python3
"""Steady admissions while sigil is upgraded or rolled back (e2e/upgrade.sh).

Sends server-side dry-run creates (admission runs in full, nothing is stored)
of Pods and of objects of other kinds, each naming one image that the
policies in force must admit (signed) or deny (unsigned), paced, until a stop
file appears or a time bound passes; judges every answer:

  correct  a signed image admitted (201), or an unsigned one denied by sigil's
           webhook ('admission webhook "...sigil..." denied the request')
  wrong    the other verdict
  failed   anything else: no answer, a timeout, a webhook that could not be
           called (the API server's 'failed calling webhook'), a 5xx

Prints one JSON object: the counts, per kind and expectation, the time span,
and up to ten examples of wrong or failed answers. Exit status 0 whatever the
verdicts: the caller decides.

Targets file, one a line: `signed|unsigned PATH KIND IMAGE`, PATH being the
collection to create in (e.g. /api/v1/namespaces/NS/pods), KIND one of pod,
rollout (argoproj.io/v1alpha1, a pod template).

Standard library only; the local cluster's admin kubeconfig (client
certificate files, as e2e/local-cluster.sh writes it) authenticates.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import ssl
import sys
import time
import urllib.parse
from datetime import datetime, timezone

# The API server waits at most the webhook's timeoutSeconds (at most 30).
REQUEST_TIMEOUT_S = 40
DENIED = re.compile(r'admission webhook "[^"]*sigil[^"]*" denied the request')


def document(kind: str, image: str, n: int) -> dict:
    if kind == "pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": f"load-{n}-"},
                "spec": {"containers": [{"name": "c", "image": image}]}}
    if kind == "rollout":
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                "metadata": {"generateName": f"load-{n}-"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "load"}},
                         "template": {"metadata": {"labels": {"app": "load"}},
                                      "spec": {"containers": [{"name": "c", "image": image}]}}}}
    raise ValueError(f"unknown kind {kind}")


def kubeconfig(path: str) -> tuple[str, int, ssl.SSLContext]:
    text = open(path).read()

    def value(key: str) -> str:
        m = re.search(rf"^\s*{key}:\s*(\S+)\s*$", text, re.M)
        if not m:
            sys.exit(f"upgrade-load: {path} has no {key} (a kubeconfig of e2e/local-cluster.sh expected)")
        return m.group(1)

    server = urllib.parse.urlsplit(value("server"))
    if server.scheme != "https" or not server.hostname or not server.port:
        sys.exit(f"upgrade-load: server {server.geturl()} is not https://HOST:PORT")
    ctx = ssl.create_default_context(cafile=value("certificate-authority"))
    ctx.load_cert_chain(value("client-certificate"), value("client-key"))
    return server.hostname, server.port, ctx


class Client:
    """One keep-alive connection, opened again after the server closes it."""

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext):
        self.host, self.port, self.ctx = host, port, ctx
        self.conn: http.client.HTTPSConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                        timeout=REQUEST_TIMEOUT_S)
            try:
                self.conn.request("POST", path + "?dryRun=All", body, {"Content-Type": "application/json"})
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, ConnectionError) as e:
                # Only a connection closed while idle is tried again, once.
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise e
        raise AssertionError("unreachable")


def judge(signed: bool, status: int, body: bytes) -> tuple[str, str]:
    try:
        message = str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        message = body[:300].decode(errors="replace")
    allowed = status == 201
    denied = status in (400, 403, 422) and DENIED.search(message) is not None
    if allowed and signed or denied and not signed:
        return "correct", ""
    if allowed or denied:
        return "wrong", f"{'signed' if signed else 'unsigned'} image {'denied' if denied else 'admitted'}: {message[:300]}"
    return "failed", f"HTTP {status}: {message[:300]}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--targets", required=True)
    p.add_argument("--stop-file", required=True, help="stop once this file exists")
    p.add_argument("--max-seconds", type=float, default=600, help="stop after this long in any case")
    p.add_argument("--pace-ms", type=float, default=100, help="start a request at most every PACE ms")
    args = p.parse_args()
    if not 0 < args.max_seconds <= 1800:
        sys.exit("upgrade-load: --max-seconds must be in (0, 1800]")
    if not 10 <= args.pace_ms <= 10000:
        sys.exit("upgrade-load: --pace-ms must be 10..10000")
    targets = []
    for number, line in enumerate(open(args.targets), 1):
        words = line.split()
        if not words:
            continue
        if len(words) != 4 or words[0] not in ("signed", "unsigned") or words[2] not in ("pod", "rollout"):
            sys.exit(f"upgrade-load: {args.targets}:{number}: want 'signed|unsigned PATH pod|rollout IMAGE'")
        targets.append((words[0] == "signed", words[1], words[2], words[3]))
    if not targets:
        sys.exit(f"upgrade-load: {args.targets} names no targets")

    client = Client(*kubeconfig(args.kubeconfig))
    counts: dict[str, dict[str, int]] = {}
    examples: list[str] = []
    total = {"correct": 0, "wrong": 0, "failed": 0}
    start = time.monotonic()
    deadline = start + args.max_seconds
    n = 0
    while time.monotonic() < deadline and not os.path.exists(args.stop_file):
        signed, path, kind, image = targets[n % len(targets)]
        body = json.dumps(document(kind, image, n)).encode()
        try:
            status, reply = client.post(path, body)
            verdict, detail = judge(signed, status, reply)
        except (OSError, http.client.HTTPException) as e:
            verdict, detail = "failed", f"no answer: {e}"
        total[verdict] += 1
        key = f"{kind} {'signed' if signed else 'unsigned'}"
        counts.setdefault(key, {"correct": 0, "wrong": 0, "failed": 0})[verdict] += 1
        if detail and len(examples) < 10:
            at = datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
            examples.append(f"{at} {key}: {detail}")
        n += 1
        time.sleep(max(0.0, start + n * args.pace_ms / 1000 - time.monotonic()))
    print(json.dumps({"admissions": n, **total, "seconds": round(time.monotonic() - start, 1),
                      "stopped_by": "stop file" if os.path.exists(args.stop_file) else "time bound",
                      "by_target": counts, "examples": examples}))


if __name__ == "__main__":
    main()
