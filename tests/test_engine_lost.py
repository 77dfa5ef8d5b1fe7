"""A Docker engine that stops answering midway: the image commands say so in one line and exit 2
(docs/RUN-GUARANTEES.md: bad input), never a traceback.

The engine here is a stand-in on a real Unix socket, reached through the real Docker SDK as
DOCKER_HOST names it: it answers what `connect` asks (the API version, a ping) and the base image's
lookup, then closes the connection on the call each command's work starts with.
"""
import http.server
import json
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class _EngineThatStopsAnswering(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answered: list[str] = []

    def _answer(self, body) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's naming
        path = self.path.split("?")[0]
        self.answered.append(f"GET {path}")
        if path.endswith("/version"):
            self._answer({"ApiVersion": "1.41", "Version": "stand-in", "MinAPIVersion": "1.12"})
        elif path.endswith("/_ping"):
            self._answer("OK")
        elif path.endswith("/images/rosetta-base:bookworm/json"):
            self._answer({"Id": "sha256:" + "0" * 64, "RepoTags": ["rosetta-base:bookworm"]})
        else:
            self.close_connection = True  # no answer at all: the engine is gone

    def do_POST(self):  # noqa: N802
        self.answered.append(f"POST {self.path.split('?')[0]}")
        self.close_connection = True

    def log_message(self, *args):  # a Unix socket's peer has no address to log
        pass


@pytest.fixture
def lost_engine():
    folder = tempfile.mkdtemp(prefix="engine-")  # short: a socket path has at most 107 bytes
    socket_path = os.path.join(folder, "docker.sock")
    server = socketserver.ThreadingUnixStreamServer(socket_path, _EngineThatStopsAnswering)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _EngineThatStopsAnswering.answered = []
    yield f"unix://{socket_path}"
    server.shutdown()
    server.server_close()
    os.unlink(socket_path)
    os.rmdir(folder)


@pytest.mark.parametrize("command, doing, last_call", [
    (["build", "pytorch", "--variant", "cpu", "--base-image", "rosetta-base:bookworm"], "building images", "POST"),
    (["push", "pytorch", "--variant", "cpu", "--registry", "127.0.0.1:1"], "pushing images", "GET"),
])
def test_an_engine_that_stops_answering_is_one_line_and_exit_2(lost_engine, tmp_path, command, doing, last_call):
    environment = dict(os.environ, DOCKER_HOST=lost_engine, HOME=str(tmp_path))
    completed = subprocess.run([sys.executable, "-m", "orchestrator", *command], cwd=ROOT, capture_output=True,
                               text=True, timeout=120, env=environment)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 2, output
    assert "Traceback" not in output, output
    error = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"the Docker engine stopped answering while {doing}" in error[0], output
    assert "docker info" in error[0]
    assert _EngineThatStopsAnswering.answered[-1].startswith(last_call), _EngineThatStopsAnswering.answered
