"""A local HTTP server whose pages tests set: stand-ins for other exporters' /metrics."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class PageServer:
    def __init__(self, page: str = "", delay: float = 0.0) -> None:
        self.page, self.delay = page, delay
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(outer.delay)
                body = outer.page.encode("utf-8", "surrogatepass")
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Recorder:
    """A local HTTP endpoint that keeps every POSTed JSON body (a webhook's receiver)."""

    def __init__(self) -> None:
        import json

        self.bodies: list[object] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.bodies.append(json.loads(raw))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
