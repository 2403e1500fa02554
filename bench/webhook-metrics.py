#!/usr/bin/env python3
"""What sigil's webhook replicas did between two scrapes of their /metrics
(bench/cluster.sh: replica shares and cold storms).

Each scrape is a directory holding one file per webhook Pod, named after the
Pod, with its Prometheus text exposition. A Pod only in the second scrape (it
started in between) counts from zero; a Pod only in the first (it went away)
is left out, and said so.

Prints one JSON object:
  pods        per Pod: reviews answered (every endpoint and decision),
              connections opened, verifications and their seconds, registry
              requests and the seconds they waited for an answer
  total       the same, summed
  shares      each Pod's fraction of the reviews (0..1), and the smallest
  gone        Pods of the first scrape missing from the second

Usage: webhook-metrics.py BEFORE_DIR AFTER_DIR
"""

from __future__ import annotations

import json
import os
import re
import sys

# name{labels} value  (labels optional; exemplars and timestamps not used here)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")

# What is summed per Pod, and from which series (all label sets added up).
SERIES = {
    "reviews": "sigil_admission_requests_total",
    "connections": "sigil_webhook_connections_total",
    "verifications": "sigil_verification_duration_seconds_count",
    "verification_s": "sigil_verification_duration_seconds_sum",
    "registry_requests": "sigil_registry_request_duration_seconds_count",
    "registry_wait_s": "sigil_registry_request_duration_seconds_sum",
}


def parse(text: str) -> dict[str, float]:
    sums = {key: 0.0 for key in SERIES}
    wanted = {series: key for key, series in SERIES.items()}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m or m.group(1) not in wanted:
            continue
        try:
            sums[wanted[m.group(1)]] += float(m.group(2))
        except ValueError:
            sys.exit(f"webhook-metrics: not a number in {line!r}")
    return sums


def scrape(directory: str) -> dict[str, dict[str, float]]:
    pods = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            pods[name] = parse(f.read())
    return pods


def delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict:
    pods = {}
    for name, now in after.items():
        then = before.get(name, {key: 0.0 for key in SERIES})
        pods[name] = {key: round(now[key] - then[key], 6) for key in SERIES}
    total = {key: round(sum(p[key] for p in pods.values()), 6) for key in SERIES}
    shares = {name: (round(p["reviews"] / total["reviews"], 4) if total["reviews"] else None)
              for name, p in pods.items()}
    known = [s for s in shares.values() if s is not None]
    return {
        "pods": pods,
        "total": total,
        "shares": shares,
        "smallest_share": min(known) if known else None,
        "gone": sorted(set(before) - set(after)),
    }


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: webhook-metrics.py BEFORE_DIR AFTER_DIR")
    print(json.dumps(delta(scrape(sys.argv[1]), scrape(sys.argv[2]))))


if __name__ == "__main__":
    main()
