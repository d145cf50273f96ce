"""A stand-in for a GitHub server: a real local HTTP server with the REST endpoints our client uses.

It is not GitHub. It follows GitHub's documented REST behaviour for what the reconciler calls, so that
PyGithub (and our Gitea client) run unmodified against it:

- paths under a prefix: `/api/v3` by default, what PyGithub requests with a GitHub Enterprise `base_url`
  (`https://HOST/api/v3`); `/api/v1` serves the Gitea flavour (Gitea's `limit` page size accepted too;
  `GET .../issues/{index}/comments` answers every comment of the issue in one response, without a `Link`
  header: Gitea's `issueGetComments` takes only `since` and `before`, no `page`/`limit`, as its swagger
  spec has it, e.g. in the generated gitea-rs client's `issue_get_comments`);
- `GET /repos/{o}/{r}`, `GET /repos/{o}/{r}/pulls?state=open`, `GET /repos/{o}/{r}/pulls/{n}`,
  `GET /repos/{o}/{r}/issues/{n}/comments`, `POST /repos/{o}/{r}/issues/{n}/comments`,
  `GET|PATCH /repos/{o}/{r}/issues/comments/{id}`;
- pagination: `per_page` (default 30, at most 100) and `page`, with a `Link` header holding absolute
  `rel="next"`, `rel="last"`, `rel="first"` and `rel="prev"` URLs that keep the other query parameters;
  pulls newest first (GitHub's default sort: created, desc), comments oldest first;
- 422 `Validation Failed` with an `errors` list when a comment body is missing or over 65,536 characters;
- 401 `Bad credentials` without `Authorization: token T` or `Bearer T`;
- `x-ratelimit-*` headers on every response; injectable faults for the next N requests: a primary rate
  limit (403, `x-ratelimit-remaining: 0`, `x-ratelimit-reset`), a secondary one (429 with `Retry-After`),
  or a server error (5xx);
- hooks: a function run (once) just before the Nth request of a method and path is served, e.g. another
  daemon writing the comment between our read and our write.

Every request is recorded (method, path, query, status) for the tests to inspect.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMENT_LIMIT = 65_536
GITEA_PREFIX = "/api/v1"
DOCS = "https://docs.github.com/rest"


@dataclass
class Fault:
    """A response to give instead of the real one."""

    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    methods: frozenset[str] | None = None  # None: any method
    after: bool = False  # process the request, then answer with this (a 502 from a proxy after the write)


@dataclass
class Hook:
    """A function to run once, just before the NTH matching request (counted from now) is served."""

    method: str
    path_suffix: str
    fn: Callable[[], object]
    nth: int = 1
    seen: int = 0


def run_due_hooks(hooks: list[Hook], lock: threading.Lock, method: str, path: str) -> None:
    """Count a request of METHOD to PATH against HOOKS; run (and drop) those whose turn it is, outside LOCK."""
    with lock:
        due = []
        for hook in list(hooks):
            if hook.method == method and path.endswith(hook.path_suffix):
                hook.seen += 1
                if hook.seen == hook.nth:
                    hooks.remove(hook)
                    due.append(hook)
    for hook in due:
        hook.fn()


@dataclass
class Recorded:
    """One request the server answered."""

    method: str
    path: str
    query: dict[str, list[str]]
    status: int


@dataclass
class FakeGitHub:
    """The server's state: one repository, its pull requests and issue comments."""

    token: str
    owner: str = "acme"
    repo: str = "cluster"
    prefix: str = "/api/v3"
    login: str = "reconciler-bot"
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)
    rate_remaining: int = 5000
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1001))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ control, from the tests

    @property
    def root(self) -> str:
        """http://127.0.0.1:PORT (the server must be running)."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """The API root to give the client (root + prefix)."""
        return self.root + self.prefix

    def add_pull(self, number: int, head_sha: str, head_ref: str = "", title: str = "") -> None:
        """Open a pull request (or move its head)."""
        with self._lock:
            pull = self.pulls.setdefault(number, {"number": number, "state": "open",
                                                  "created": time.time() + number / 1000.0})
            pull.update(head_sha=head_sha, head_ref=head_ref or f"pr-{number}", title=title or f"PR {number}")

    def add_comment(self, number: int, body: str, login: str = "someone") -> int:
        """A comment by somebody else (or by us, with login=self.login)."""
        with self._lock:
            return self._new_comment(number, body, login)["id"]

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        """The comments of one PR, oldest first."""
        return [c for c in sorted(self.comments.values(), key=lambda c: c["id"]) if c["issue"] == number]

    def inject(self, status: int, headers: dict[str, str] | None = None, body: dict[str, Any] | None = None,
               times: int = 1, methods: set[str] | None = None, after: bool = False) -> None:
        """Answer the next TIMES requests (of METHODS) with this response (AFTER: once processed)."""
        fault = Fault(status, headers or {}, body or {"message": "Server Error"},
                      frozenset(methods) if methods else None, after)
        self.faults.extend([fault] * times)

    def before(self, method: str, path_suffix: str, fn: Callable[[], object], nth: int = 1) -> None:
        """Run FN once just before the NTH request of METHOD to a path ending in PATH_SUFFIX is served (the
        client waits meanwhile: FN may make requests of its own, served by other threads)."""
        with self._lock:
            self.hooks.append(Hook(method, path_suffix, fn, nth))

    def inject_primary_rate_limit(self, times: int = 1, reset_in: int = 2, status: int = 403) -> None:
        """GitHub's primary rate limit: 403 (or 429), x-ratelimit-remaining 0, reset as epoch seconds."""
        reset = int(time.time()) + reset_in
        self.inject(status, {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0", "x-ratelimit-used": "5000",
                             "x-ratelimit-reset": str(reset), "x-ratelimit-resource": "core"},
                    {"message": "API rate limit exceeded for user ID 1.",
                     "documentation_url": f"{DOCS}/overview/resources-in-the-rest-api#rate-limiting"}, times)

    def inject_secondary_rate_limit(self, times: int = 1, retry_after: int = 3, status: int = 429) -> None:
        """GitHub's secondary rate limit: 429 (or 403) with Retry-After seconds."""
        self.inject(status, {"Retry-After": str(retry_after)},
                    {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you "
                                "try again.",
                     "documentation_url": f"{DOCS}/overview/rate-limits-for-the-rest-api"}, times)

    def count(self, method: str, path_suffix: str = "") -> int:
        """How many requests of METHOD went to a path ending in PATH_SUFFIX."""
        return sum(1 for r in self.requests if r.method == method and r.path.endswith(path_suffix))

    @contextmanager
    def running(self) -> Iterator[FakeGitHub]:
        """Serve on 127.0.0.1 (a free port) in a thread while the block runs."""
        fake = self

        class Handler(_Handler):
            server_state = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-github", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)

    # ------------------------------------------------------------------ JSON documents, GitHub's shape

    def _repo_url(self) -> str:
        return f"{self.base_url}/repos/{self.owner}/{self.repo}"

    def _repo_json(self) -> dict[str, Any]:
        return {"id": 1, "name": self.repo, "full_name": f"{self.owner}/{self.repo}", "private": True,
                "owner": {"login": self.owner, "id": 2, "type": "Organization"},
                "url": self._repo_url(), "html_url": f"{self.root}/{self.owner}/{self.repo}",
                "pulls_url": self._repo_url() + "/pulls{/number}", "default_branch": "main"}

    def _pull_json(self, pull: dict[str, Any]) -> dict[str, Any]:
        n = pull["number"]
        url = f"{self._repo_url()}/pulls/{n}"
        return {"url": url, "id": 10_000 + n, "number": n, "state": pull["state"], "title": pull["title"],
                "html_url": f"{self.root}/{self.owner}/{self.repo}/pull/{n}",
                "issue_url": f"{self._repo_url()}/issues/{n}", "comments_url": f"{self._repo_url()}/issues/{n}/comments",
                "user": {"login": "admin", "id": 3},
                "head": {"label": f"{self.owner}:{pull['head_ref']}", "ref": pull["head_ref"], "sha": pull["head_sha"]},
                "base": {"label": f"{self.owner}:main", "ref": "main", "sha": "0" * 40}}

    def _comment_json(self, comment: dict[str, Any]) -> dict[str, Any]:
        return {"id": comment["id"], "url": f"{self._repo_url()}/issues/comments/{comment['id']}",
                "html_url": f"{self.root}/{self.owner}/{self.repo}/pull/{comment['issue']}#issuecomment-{comment['id']}",
                "issue_url": f"{self._repo_url()}/issues/{comment['issue']}", "body": comment["body"],
                "user": {"login": comment["login"], "id": 4}, "created_at": "2026-11-21T00:00:00Z",
                "updated_at": comment["updated_at"]}

    def _new_comment(self, number: int, body: str, login: str) -> dict[str, Any]:
        comment = {"id": next(self._ids), "issue": number, "body": body, "login": login,
                   "updated_at": "2026-11-21T00:00:00Z"}
        self.comments[comment["id"]] = comment
        return comment


def _validation_failed(field_name: str, message: str, code: str = "custom") -> dict[str, Any]:
    return {"message": "Validation Failed",
            "errors": [{"resource": "IssueComment", "code": code, "field": field_name, "message": message}],
            "documentation_url": f"{DOCS}/issues/comments#create-an-issue-comment", "status": "422"}


class _Handler(BaseHTTPRequestHandler):
    server_state: FakeGitHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: the tests read FakeGitHub.requests instead."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._serve("PATCH")

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        state = self.server_state
        if self._override is not None:
            status, body, headers = self._override.status, self._override.body, self._override.headers
            self._override = None
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        out = {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": str(state.rate_remaining),
               "x-ratelimit-reset": str(int(time.time()) + 3600), "x-ratelimit-used": str(5000 - state.rate_remaining),
               "x-ratelimit-resource": "core", "x-github-media-type": "github.v3; format=json"}
        out.update(headers or {})
        for key, value in out.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self._status = status

    def _serve(self, method: str) -> None:
        state = self.server_state
        parsed = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parsed.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self._status = 0
        self._override: Fault | None = None
        run_due_hooks(state.hooks, state._lock, method, parsed.path)
        try:
            self._route(method, parsed.path, query, raw)
        finally:
            with state._lock:
                state.requests.append(Recorded(method, parsed.path, query, self._status))

    def _route(self, method: str, path: str, query: dict[str, list[str]], raw: bytes) -> None:
        state = self.server_state
        with state._lock:
            fault = next((f for f in state.faults if f.methods is None or method in f.methods), None)
            if fault is not None:
                state.faults.remove(fault)
        if fault is not None and fault.after:
            self._override = fault
        elif fault is not None:
            self._send(fault.status, fault.body, fault.headers)
            return
        auth = self.headers.get("Authorization", "")
        if auth not in (f"token {state.token}", f"Bearer {state.token}"):
            self._send(401, {"message": "Bad credentials", "documentation_url": DOCS, "status": "401"})
            return
        state.rate_remaining = max(0, state.rate_remaining - 1)
        if not path.startswith(state.prefix + "/"):
            self._not_found()
            return
        parts = path[len(state.prefix):].strip("/").split("/")
        if parts[:3] != ["repos", state.owner, state.repo]:
            self._not_found()
            return
        rest = parts[3:]
        with state._lock:
            if method == "GET" and rest == []:
                self._send(200, state._repo_json())
            elif method == "GET" and rest == ["pulls"]:
                wanted = query.get("state", ["open"])[0]
                pulls = [p for p in state.pulls.values() if wanted == "all" or p["state"] == wanted]
                pulls.sort(key=lambda p: p["created"], reverse=True)
                self._page(path, query, [state._pull_json(p) for p in pulls])
            elif method == "GET" and len(rest) == 2 and rest[0] == "pulls" and rest[1].isdigit():
                pull = state.pulls.get(int(rest[1]))
                self._send(200, state._pull_json(pull)) if pull else self._not_found()
            elif len(rest) == 3 and rest[0] == "issues" and rest[1].isdigit() and rest[2] == "comments":
                self._issue_comments(method, int(rest[1]), path, query, raw)
            elif len(rest) == 3 and rest[:2] == ["issues", "comments"] and rest[2].isdigit():
                self._one_comment(method, int(rest[2]), raw)
            else:
                self._not_found()

    def _issue_comments(self, method: str, number: int, path: str, query: dict[str, list[str]], raw: bytes) -> None:
        state = self.server_state
        if number not in state.pulls:
            self._not_found()
        elif method == "GET":
            items = [state._comment_json(c) for c in state.comments_on(number)]
            if state.prefix == GITEA_PREFIX:
                self._send(200, items)  # Gitea: every comment of the issue, no pages (module docstring)
            else:
                self._page(path, query, items)
        elif method == "POST":
            body = self._body_field(raw)
            if body is not None:
                self._send(201, state._comment_json(state._new_comment(number, body, state.login)))
        else:
            self._not_found()

    def _one_comment(self, method: str, comment_id: int, raw: bytes) -> None:
        state = self.server_state
        comment = state.comments.get(comment_id)
        if comment is None:
            self._not_found()
        elif method == "GET":
            self._send(200, state._comment_json(comment))
        elif method == "PATCH":
            body = self._body_field(raw)
            if body is not None:
                comment["body"] = body
                comment["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self._send(200, state._comment_json(comment))
        else:
            self._not_found()

    def _body_field(self, raw: bytes) -> str | None:
        """The `body` of a comment request, or None after answering 400/422."""
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, {"message": "Problems parsing JSON", "documentation_url": DOCS, "status": "400"})
            return None
        body = data.get("body") if isinstance(data, dict) else None
        if not isinstance(body, str) or not body:
            self._send(422, _validation_failed("body", "body wasn't supplied.", "missing_field"))
            return None
        if len(body) > COMMENT_LIMIT:
            self._send(422, _validation_failed("body", f"Body is too long (maximum is {COMMENT_LIMIT} characters)"))
            return None
        return body

    def _page(self, path: str, query: dict[str, list[str]], items: list[Any]) -> None:
        """One page of ITEMS with GitHub's Link header (per_page default 30, max 100; Gitea's limit too)."""
        state = self.server_state
        size_arg = (query.get("per_page") or query.get("limit") or ["30"])[0]
        per_page = max(1, min(100, int(size_arg))) if size_arg.isdigit() else 30
        page = int(query.get("page", ["1"])[0]) if query.get("page", ["1"])[0].isdigit() else 1
        page = max(page, 1)
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]

        def link(n: int) -> str:
            q = {k: v[0] for k, v in query.items() if k not in ("page",)}
            q["page"] = str(n)
            return f"<{state.root}{path}?{urllib.parse.urlencode(q)}>"

        links = []
        if page < last:
            links += [f'{link(page + 1)}; rel="next"', f'{link(last)}; rel="last"']
        if page > 1:
            links += [f'{link(1)}; rel="first"', f'{link(page - 1)}; rel="prev"']
        self._send(200, chunk, {"Link": ", ".join(links)} if links else None)

    def _not_found(self) -> None:
        self._send(404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"})
