"""Small HTTP servers the tests stand up beside tensorgate (an OTLP collector, a CloudEvents sink, a web page's
origin): on 127.0.0.1, a free port unless one is given, served from a daemon thread, stopped by `close()`."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not log each request to stderr."""

    def log_message(self, *args) -> None:
        pass


class LocalHTTPServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0):
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
