#!/usr/bin/env python3
"""A counting reverse proxy in front of an OCI registry, for the benchmark's
"registry requests per new image" (bench/cluster.sh).

Listens on 127.0.0.1:PORT (the node exposes it to pods), forwards every
request unchanged to the upstream registry over plain HTTP, and appends one
line per request to the log: `<unix time> <method> <status> <path>`. The
benchmark counts the lines written during a phase. GET /_count (answered
here, not forwarded) returns the number of requests forwarded so far.

While --outage-file exists, every request is answered 503 without being
forwarded (and still counted): a registry outage on demand. While
--latency-file exists, it holds a number of milliseconds that every request
waits before it is forwarded: a registry that far away, on demand (the wait
is per request and does not hold up the others).

Usage: counting-proxy.py --listen PORT --upstream HOST:PORT --log FILE
                         [--outage-file FILE] [--latency-file FILE]
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import os
import sys
import threading
import time

# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own business.
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
       "trailer", "transfer-encoding", "upgrade"}
CHUNK = 1 << 16


def latency_s(latency_file: str | None) -> float:
    """The added latency in seconds: the file's number of milliseconds (0..10000), 0 without it."""
    if not latency_file:
        return 0.0
    try:
        with open(latency_file) as f:
            ms = float(f.read().strip() or 0)
    except FileNotFoundError:
        return 0.0
    except (OSError, ValueError) as e:
        print(f"counting-proxy: {latency_file}: {e}; no latency added", file=sys.stderr)
        return 0.0
    return min(max(ms, 0.0), 10000.0) / 1000


def make_handler(upstream: str, log, outage_file: str | None, latency_file: str | None,
                 counter: list[int], lock: threading.Lock):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # the request log below is the record
            pass

        def record(self, status: int) -> None:
            with lock:
                counter[0] += 1
                log.write(f"{time.time():.3f} {self.command} {status} {self.path}\n")
                log.flush()

        def relay(self) -> None:
            if self.path == "/_count":
                body = str(counter[0]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else None
            if outage_file and os.path.exists(outage_file):
                self.record(503)
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            delay = latency_s(latency_file)
            if delay:
                time.sleep(delay)
            conn = http.client.HTTPConnection(upstream, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                conn.request(self.command, self.path, body, headers)
                resp = conn.getresponse()
                self.record(resp.status)
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                if resp.getheader("Content-Length") is None and self.command != "HEAD":
                    # Unknown length: stream it and close, as HTTP/1.0 would.
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if self.command != "HEAD":
                    while chunk := resp.read(CHUNK):
                        self.wfile.write(chunk)
            except (OSError, http.client.HTTPException) as e:
                self.record(502)
                msg = f"counting-proxy: upstream {upstream}: {e}\n".encode()
                self.send_response(502)
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
            finally:
                conn.close()

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = relay

    return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--outage-file")
    p.add_argument("--latency-file")
    args = p.parse_args()
    log = open(args.log, "a")
    counter, lock = [0], threading.Lock()
    class Server(http.server.ThreadingHTTPServer):
        # A storm of new images opens hundreds of connections at once; the
        # default backlog of 5 would drop their SYNs into 1 s retries.
        request_queue_size = 1024

    server = Server(
        ("127.0.0.1", args.listen), make_handler(args.upstream, log, args.outage_file, args.latency_file, counter, lock))
    server.daemon_threads = True
    print(f"counting-proxy: 127.0.0.1:{args.listen} -> {args.upstream}", file=sys.stderr)
    server.serve_forever()


if __name__ == "__main__":
    main()
