"""A real loopback HTTP server that speaks the /v1/systemone contract with scripted answers.

It exists to make the runner meet misbehaving backends for real (crash mid-pass, non-JSON,
NaN probability, slow answers, never ready, ignoring SIGTERM) without loading a model.
Behaviour comes from the environment:

    SCRIPTED_FAULT   none | crash | non_json | nan | slow | never_ready | exit_now | ignore_sigterm
                     | trickle (the answer's bytes one per SCRIPTED_TRICKLE_S) | trickle_health (/health so)
    SCRIPTED_AFTER   number of /v1/systemone requests answered normally before the fault (default 0)
    SCRIPTED_DELAY_S seconds every /v1/systemone answer waits (default 0), to make passes last
    SCRIPTED_HEALTH_FILE  a JSON file whose object is merged into the /health answer (e.g. `packages`)
    SCRIPTED_HEADER  "Name: value", a header every /v1/systemone answer carries (e.g. X-Queue-Time-Ms: 1e308)
    SCRIPTED_PAD_BYTES  bytes of padding in every /v1/systemone answer's metadata (a huge answer)

A slow answer prints SLOW_STARTED first, so a test can wait for that line in the backend's log
instead of sleeping a fixed time.
"""

import hashlib
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAULT = os.environ.get("SCRIPTED_FAULT", "none")
AFTER = int(os.environ.get("SCRIPTED_AFTER", "0"))
DELAY_S = float(os.environ.get("SCRIPTED_DELAY_S", "0"))
TRICKLE_S = float(os.environ.get("SCRIPTED_TRICKLE_S", "0.5"))
HEALTH_FILE = os.environ.get("SCRIPTED_HEALTH_FILE")
HEALTH_EXTRA = json.loads(Path(HEALTH_FILE).read_text(encoding="utf-8")) if HEALTH_FILE else {}
HEADER = os.environ.get("SCRIPTED_HEADER", "")
PAD_BYTES = int(os.environ.get("SCRIPTED_PAD_BYTES", "0"))
SLOW_S = float(os.environ.get("SCRIPTED_SLOW_S", "5"))  # how long a `slow` answer takes
served = 0
SLOW_STARTED = "scripted backend: slow answer started"  # printed (to the backend log) as a slow answer begins


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep the backend log readable
        pass

    def _send(self, status, body: bytes, ctype="application/json", trickle=False, extra=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if extra and HEADER:
            self.send_header(*HEADER.split(": ", 1))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not trickle:
            self.wfile.write(body)
            return
        self.wfile.flush()
        for k in range(len(body)):  # one byte at a time: every recv of the client gets something
            self.wfile.write(body[k:k + 1])
            self.wfile.flush()
            time.sleep(TRICKLE_S)

    def do_GET(self):
        if self.path == "/health":
            if FAULT == "never_ready":
                return self._send(503, b'{"status":"loading"}')
            health = {"status": "ready", "model": "scripted", "method": "scripted", **HEALTH_EXTRA}
            return self._send(200, json.dumps(health).encode(),
                              trickle=FAULT == "trickle_health")
        self._send(404, b'{"error":"not found"}')

    def do_POST(self):
        global served
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        state = json.dumps(body["state"], sort_keys=True)
        faulty = served >= AFTER
        served += 1
        time.sleep(DELAY_S)
        if faulty and FAULT == "crash":
            os._exit(3)
        if faulty and FAULT == "non_json":
            return self._send(200, b"<html>oops</html>", "text/html")
        if faulty and FAULT == "slow":
            print(SLOW_STARTED, flush=True)  # tests wait for this line, not for a fixed time
            time.sleep(SLOW_S)
        p = int(hashlib.sha256(state.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        prob = float("nan") if faulty and FAULT == "nan" else p
        answer = {"model": "open-jev", "answers": {"q": {"type": "noul", "noul": prob}},
                  "usage": {"input_tokens": 10 + len(state) // 4, "output_tokens": 0},
                  "metadata": {"method": "scripted", **({"pad": "x" * PAD_BYTES} if PAD_BYTES else {})}}
        self._send(200, json.dumps(answer).encode(), trickle=faulty and FAULT == "trickle", extra=True)


def main():
    port = int(sys.argv[sys.argv.index("--port") + 1])
    if FAULT == "exit_now":
        print("scripted backend: exiting before ready as asked", flush=True)
        sys.exit(7)
    if FAULT == "ignore_sigterm":
        signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"scripted backend on 127.0.0.1:{port} fault={FAULT} after={AFTER} "
          f"upstream={os.environ.get('SCRIPTED_UPSTREAM', '-')}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
