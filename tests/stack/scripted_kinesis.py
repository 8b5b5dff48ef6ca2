"""A Kinesis endpoint on localhost that answers from a script and counts requests: for tests of one client's retries."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, Any]]
THROTTLE: Reply = (400, {"__type": "ProvisionedThroughputExceededException", "message": "Rate exceeded for shard"})
SERVER_ERROR: Reply = (500, {"__type": "InternalFailure", "message": "internal failure"})
OK: Reply = (200, {"Shards": []})


class ScriptedKinesis:
    """Answers each request with the next scripted reply (the last one repeats) and counts the requests."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies, self.requests = replies, 0
        self.user_agents: list[str] = []  # each request's User-Agent header
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                script.user_agents.append(self.headers.get("User-Agent", ""))
                status, body = script.replies[min(script.requests, len(script.replies) - 1)]
                script.requests += 1
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
