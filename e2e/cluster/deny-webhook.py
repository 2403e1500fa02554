#!/usr/bin/env python3
"""A validating admission webhook that denies everything it is asked about.

smoke.sh registers it by URL (https://127.0.0.1:PORT/validate) to prove that
the local API server calls webhooks served by host processes, and that the
deny message reaches both a kubectl user and a controller's events.

Usage: deny-webhook.py CERT KEY PORT_FILE
Binds a free port on 127.0.0.1 and writes it to PORT_FILE once serving.
"""

import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# An AdmissionReview for one object is a few KiB; refuse anything absurd.
MAX_BODY = 1 << 20
MESSAGE = "sigil-smoke: denied by the test webhook"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if self.path.split("?")[0] != "/validate" or not 0 < length <= MAX_BODY:
            self.send_error(400)
            return
        try:
            request = json.loads(self.rfile.read(length))["request"]
            uid = request["uid"]
        except (ValueError, KeyError, TypeError):
            self.send_error(400)
            return
        kind = request.get("kind", {}).get("kind", "?")
        # Pods a controller creates have only generateName when admitted.
        obj = request.get("object") or {}
        name = obj.get("metadata", {}).get("name") or obj.get("metadata", {}).get("generateName", "?")
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": uid,
                "allowed": False,
                "status": {"code": 403, "message": f"{MESSAGE}: {kind} {name}"},
            },
        }
        body = json.dumps(review).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("deny-webhook: " + fmt % args + "\n")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    cert, key, port_file = sys.argv[1:]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(port_file, "w") as f:
        f.write(f"{server.server_address[1]}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
