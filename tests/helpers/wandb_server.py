"""A stand-in for the W&B server that keeps what wandb-core uploads, for tests.

Why this exists: what a W&B run ends with after `wandb sync` of several
offline folders, or after an online resume, is decided by wandb-core's
upload code (which folder resumes the run, at which history line and
`_step` it continues), and W&B's own server cannot run here. This answers
the few GraphQL operations that code makes, the way W&B's server does, and
stores each FileStream file as W&B's own test spy does
(tests/fixtures/wandb_backend_spy in wandb/wandb): lines at the offsets
wandb-core sends, a line sent again at an offset replacing the one there.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HISTORY, SUMMARY = "wandb-history.jsonl", "wandb-summary.json"
_OPERATION = re.compile(r"\b(?:query|mutation)\s+(\w+)")
_FILE_STREAM = re.compile(r"/files/([^/]+)/([^/]+)/([^/]+)/file_stream")


class WandbServer:
    """`url` to point `WANDB_BASE_URL` at; `history(run_id)` the run's history rows, line by line."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}  # run id -> {"files": {name: {offset: line}}, "config": str}
        self.operations: list[tuple[str, dict[str, Any]]] = []  # (GraphQL operation, variables), in order
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def history(self, run_id: str) -> list[dict[str, Any]]:
        lines = self.runs[run_id]["files"].get(HISTORY, {})
        assert sorted(lines) == list(range(len(lines))), f"history lines with gaps: {sorted(lines)}"
        return [json.loads(lines[offset]) for offset in sorted(lines)]

    def _run(self, run_id: str) -> dict[str, Any]:
        return self.runs.setdefault(run_id, {"files": {}, "config": "{}"})

    def graphql(self, operation: str, variables: dict[str, Any], host: str) -> dict[str, Any]:
        with self._lock:
            self.operations.append((operation, variables))
            if operation == "UpsertBucket":
                run = self._run(variables["name"])
                run["config"] = variables.get("config") or run["config"]
                project = {"id": "p", "name": variables.get("project") or "uncategorized", "entity": {"id": "e", "name": variables.get("entity") or "me"}}
                bucket = {"id": variables["name"], "name": variables["name"], "displayName": variables.get("displayName"), "config": run["config"],
                          "project": project, "historyLineCount": len(run["files"].get(HISTORY, {}))}  # fmt: skip
                return {"upsertBucket": {"bucket": bucket, "inserted": True}}
            if operation == "RunResumeStatus":
                return {"model": {"id": "p", "name": variables.get("project"), "entity": {"id": "e", "name": "me"}, "bucket": self._resume_status(variables["name"])}}
            if operation == "CreateRunFiles":
                files = [{"name": name, "uploadUrl": f"http://{host}/upload/{name}"} for name in variables.get("files", [])]
                return {"createRunFiles": {"runID": variables.get("run"), "uploadHeaders": [], "files": files}}
            if operation.startswith("Viewer"):
                return {"viewer": {"id": "u", "entity": "me", "username": "me", "flags": "{}", "teams": {"edges": []}}}
            return {"serverInfo": {"features": []}}

    def _resume_status(self, run_id: str) -> dict[str, Any] | None:
        """What W&B's server answers a resume with: the run's line counts, the
        tail of its history, its summary and config; None for no such run."""
        if run_id not in self.runs:
            return None
        files = self.runs[run_id]["files"]
        history = [files[HISTORY][offset] for offset in sorted(files.get(HISTORY, {}))]
        summary = files.get(SUMMARY, {})
        return {
            "id": run_id, "name": run_id, "historyLineCount": len(history), "eventsLineCount": 0, "logLineCount": 0,
            "historyTail": json.dumps(history[-10:]), "eventsTail": "[]", "summaryMetrics": summary[max(summary)] if summary else "{}",
            "config": self.runs[run_id]["config"], "wandbConfig": json.dumps({"t": {}}), "tags": [], "notes": None,
        }  # fmt: skip

    def file_stream(self, run_id: str, request: dict[str, Any]) -> None:
        with self._lock:
            run = self._run(run_id)
            for name, chunk in request.get("files", {}).items():
                lines = run["files"].setdefault(name, {})
                for index, line in enumerate(chunk["content"]):
                    lines[chunk["offset"] + index] = line


def _handler(server: WandbServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_PUT(self) -> None:  # file uploads
            self._read()
            self._reply({})

        def do_POST(self) -> None:
            body = self._read()
            stream = _FILE_STREAM.match(self.path)
            if self.path.startswith("/graphql"):
                request = json.loads(body)
                found = _OPERATION.search(request.get("query", ""))
                self._reply({"data": server.graphql(found.group(1) if found else "", request.get("variables") or {}, self.headers["Host"])})
            elif stream:
                server.file_stream(stream.group(3), json.loads(body))
                self._reply({"exitcode": None, "limits": {}})
            else:  # wandb-core's own telemetry
                self._reply({})

        def _read(self) -> bytes:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body

        def _reply(self, answer: dict[str, Any]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
