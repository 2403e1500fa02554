#!/usr/bin/env python3
"""What a peer answered while the registry was down, from a trace of
bench/admission-load.py (--trace) and the outage's start and end.

Usage: bench/outage.py TRACE START END > outage.json   (unix times)

Prints: the requests sent during the outage by outcome (admitted, denied by
the peer, failed: no verdict), split by signed and unsigned, the distinct
answers (at most five), unsigned images admitted at any time (fail-open: a
wrong verdict), and the recovery time: from the end of the outage to the
first signed image admitted by a request sent after it.
"""

import json
import sys


def analyse(rows: list[dict], start: float, end: float) -> dict:
    during = [r for r in rows if start <= r["started"] < end]
    def outcome(r):
        if r["status"] == 201:
            return "admitted"
        return "denied" if r["verdict"] in ("correct", "wrong") else "failed"
    counts = {f"{'signed' if s else 'unsigned'}_{o}": 0 for s in (True, False) for o in ("admitted", "denied", "failed")}
    answers: list[str] = []
    for r in during:
        counts[f"{'signed' if r['signed'] else 'unsigned'}_{outcome(r)}"] += 1
        text = f"HTTP {r['status']}: {r['message']}"[:240]
        if outcome(r) != "admitted" and text not in answers and len(answers) < 5:
            answers.append(text)
    after = [r for r in rows if r["started"] >= end and r["signed"] and r["status"] == 201]
    first = min(after, key=lambda r: r["started"], default=None)
    return {
        "outage_s": round(end - start, 2),
        "requests_during": len(during),
        "slowest_ms_during": max((r["ms"] for r in during), default=None),
        **counts,
        "answers_during": answers,
        "unsigned_admitted_total": sum(1 for r in rows if not r["signed"] and r["status"] == 201),
        "recovery_s": None if first is None else round(first["started"] + first["ms"] / 1000 - end, 2),
        "requests_total": len(rows),
        "last_request_s_after_end": round(max(r["started"] for r in rows) - end, 2) if rows else None,
    }


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit("usage: bench/outage.py TRACE START END")
    try:
        rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
        start, end = float(sys.argv[2]), float(sys.argv[3])
    except (OSError, ValueError) as e:
        sys.exit(f"outage: {e}")
    print(json.dumps(analyse(rows, start, end)))


if __name__ == "__main__":
    main()
