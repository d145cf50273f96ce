"""A stand-in for a GitLab server (not GitLab): the few REST v4 endpoints python-gitlab calls for us.

`GET /api/v4/projects/{id}/merge_requests?state=opened`, `GET|POST .../merge_requests/{iid}/notes`,
`PUT .../merge_requests/{iid}/notes/{note_id}`, `PRIVATE-TOKEN` authentication (401 otherwise),
`page`/`per_page` pagination with `Link` and `X-Next-Page` headers as GitLab documents them,
injectable faults (429 with `Retry-After`, 5xx) for the next N requests, and hooks as fake_github.py has them
(a function run once just before the Nth request of a method and path, e.g. another daemon's write).
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.forge.fake_github import Hook, run_due_hooks


@dataclass
class FakeGitLab:
    """One project, its merge requests and their notes."""

    token: str
    project: str = "infra/hpc/cluster"
    mrs: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: dict[int, dict[str, Any]] = field(default_factory=dict)
    faults: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    log: list[tuple[str, str, int]] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(501))
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """The server root, as python-gitlab wants it (it adds /api/v4)."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add_mr(self, iid: int, sha: str, system_note: bool = True) -> None:
        """Open a merge request (with a system note, as GitLab adds on every push)."""
        self.mrs[iid] = {"iid": iid, "id": 9000 + iid, "sha": sha, "source_branch": f"mr-{iid}",
                         "title": f"MR {iid}", "state": "opened"}
        if system_note:
            self.add_note(iid, "added 1 commit", system=True)

    def add_note(self, iid: int, body: str, system: bool = False) -> int:
        """A note on a merge request."""
        note_id = next(self._ids)
        self.notes[note_id] = {"id": note_id, "mr": iid, "body": body, "system": system}
        return note_id

    def notes_on(self, iid: int) -> list[dict[str, Any]]:
        """Notes of one merge request, oldest first."""
        return [n for n in sorted(self.notes.values(), key=lambda n: n["id"]) if n["mr"] == iid]

    def before(self, method: str, path_suffix: str, fn: Callable[[], object], nth: int = 1) -> None:
        """Run FN once just before the NTH request of METHOD to a path ending in PATH_SUFFIX is served."""
        with self._lock:
            self.hooks.append(Hook(method, path_suffix, fn, nth))

    def count(self, method: str, path_suffix: str = "") -> int:
        """How many requests of METHOD went to a path ending in PATH_SUFFIX (the query left out)."""
        return sum(1 for m, path, _ in self.log if m == method and path.split("?")[0].endswith(path_suffix))

    @contextmanager
    def running(self) -> Iterator[FakeGitLab]:
        """Serve on 127.0.0.1 in a thread."""
        fake = self

        class Handler(_Handler):
            state = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    state: FakeGitLab
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet."""

    def do_GET(self) -> None:  # noqa: N802
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.state.log.append((self.command, self.path, status))

    def _serve(self, method: str) -> None:
        state = self.state
        parsed = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parsed.query)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        run_due_hooks(state.hooks, state._lock, method, parsed.path)
        if state.faults:
            status, headers = state.faults.pop(0)
            self._send(status, {"message": "fault"}, headers)
            return
        if self.headers.get("PRIVATE-TOKEN") != state.token:
            self._send(401, {"message": "401 Unauthorized"})
            return
        base = f"/api/v4/projects/{urllib.parse.quote(state.project, safe='')}/merge_requests"
        if not parsed.path.startswith(base):
            self._send(404, {"message": "404 Project Not Found"})
            return
        rest = [p for p in parsed.path[len(base):].split("/") if p]
        if method == "GET" and not rest:
            wanted = query.get("state", ["all"])[0]
            items = [m for m in sorted(state.mrs.values(), key=lambda m: -m["iid"])
                     if wanted in ("all", m["state"])]
            self._page(parsed.path, query, items)
        elif len(rest) == 2 and rest[1] == "notes" and int(rest[0]) in state.mrs:
            iid = int(rest[0])
            if method == "GET":
                self._page(parsed.path, query, state.notes_on(iid))
            elif method == "POST":
                body = json.loads(raw or b"{}").get("body")
                note_id = state.add_note(iid, body)
                self._send(201, state.notes[note_id])
            else:
                self._send(405, {"message": "405 Method Not Allowed"})
        elif len(rest) == 3 and rest[1] == "notes" and method == "PUT" and int(rest[2]) in state.notes:
            note = state.notes[int(rest[2])]
            note["body"] = json.loads(raw or b"{}").get("body", note["body"])
            self._send(200, note)
        else:
            self._send(404, {"message": "404 Not found"})

    def _page(self, path: str, query: dict[str, list[str]], items: list[Any]) -> None:
        per_page = min(100, int(query.get("per_page", ["20"])[0]))
        page = int(query.get("page", ["1"])[0])
        pages = max(1, -(-len(items) // per_page))
        headers = {"X-Page": str(page), "X-Per-Page": str(per_page), "X-Total": str(len(items)),
                   "X-Total-Pages": str(pages), "X-Next-Page": str(page + 1) if page < pages else ""}
        if page < pages:
            q = {k: v[0] for k, v in query.items()}
            q["page"] = str(page + 1)
            headers["Link"] = f'<{self.state.url}{path}?{urllib.parse.urlencode(q)}>; rel="next"'
        self._send(200, items[(page - 1) * per_page: page * per_page], headers)
