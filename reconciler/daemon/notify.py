"""Notifications through Apprise: one message per event, de-duplicated, rate-limited, sent off the daemon's loop.

Target URLs may hold tokens (Slack, Teams, Matrix, SMTP passwords): they are read from `url_env`/`url_file` when
the Notifier is built and never logged. Our logs name a target by its scheme only (`json://…`); Apprise's own
`apprise` logger is silenced, and urllib3's records that quote a piece of a target URL are dropped (its debug
lines name request paths, where Slack, Discord or Telegram keep their tokens).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import structlog

from reconciler.common import hostlist
from reconciler.daemon.config import NotificationsConfig, NotifyTarget
from reconciler.model import parse_duration
from reconciler.rollout.rollback_text import FIRST_COMMIT, restore_headline, rollback_lines

if TYPE_CHECKING:
    import apprise  # imported when a Notifier is built: a daemon without notifications never loads it

CONNECT_TIMEOUT = 3.0  # seconds (Apprise's `cto`), unless the URL gives its own
READ_TIMEOUT = 5.0  # seconds (Apprise's `rto`), unless the URL gives its own
QUEUE_SIZE = 100  # messages waiting to be sent; more are dropped (counted), the loop never waits
THREAD_NAME = "reconciler-notify"
MIN_FRAGMENT = 4  # shorter pieces of a URL (ports, "api") are not worth hiding and would hide everything
MAX_RESTORE_LINES = 15  # per-node lines of a before-image restore a message carries
FAILURE_EVENTS = {"rolled-back", "apply-failed", "source-unreachable", "invalid-commit"}
_QUIET_LOGGERS = ("urllib3", "urllib3.connectionpool", "urllib3.connection", "urllib3.poolmanager",
                  "urllib3.util.retry", "urllib3.response", "requests", "requests.packages.urllib3")


class NotifyConfigError(ValueError):
    """A notification target that cannot be used (missing variable or file, a URL Apprise rejects)."""


@dataclass
class Message:
    """One notification."""

    event: str
    title: str
    body: str
    key: str | None = None


@dataclass
class _Target:
    label: str  # the scheme only: what logs may say
    events: frozenset[str]
    app: apprise.Apprise


class _QuotesATarget(logging.Filter):
    """Drop library log records that quote a piece of a target URL (user, password, host, path, query values)."""

    def __init__(self) -> None:
        super().__init__()
        self.fragments: set[str] = set()

    def add(self, url: str) -> None:
        """Hide the pieces of URL from now on."""
        rest = url.split("://", 1)[-1]
        for piece in re.split(r"[/:@?&=#,;+ ]+", rest):
            if len(piece) >= MIN_FRAGMENT:
                self.fragments |= {piece, quote(piece, safe=""), unquote(piece)}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record: drop it rather than risk it
            return False
        return not any(fragment in text for fragment in self.fragments)


_HIDE = _QuotesATarget()


def _silence_libraries(urls: Iterable[str]) -> None:
    """Apprise logs URLs and hosts: nothing of it reaches any handler; urllib3 records quoting URLS are dropped."""
    quiet = logging.getLogger("apprise")
    quiet.setLevel(logging.CRITICAL + 1)
    quiet.propagate = False
    if not any(isinstance(h, logging.NullHandler) for h in quiet.handlers):
        quiet.addHandler(logging.NullHandler())
    for url in urls:
        _HIDE.add(url)
    for name in _QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if _HIDE not in logger.filters:
            logger.addFilter(_HIDE)


def scheme_of(url: str) -> str:
    """What may be logged of a URL: its scheme (`json://…`)."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", url)
    return f"{match.group(1).lower()}://…" if match else "(not a URL)"


def resolve_url(target: NotifyTarget, where: str, base_dir: Path | None = None) -> str:
    """The target's URL, from url, url_env or url_file; errors name the variable or file, never the value."""
    if target.url is not None:
        return target.url
    if target.url_env is not None:
        value = os.environ.get(target.url_env, "").strip()
        if not value:
            raise NotifyConfigError(f"{where}.url_env: environment variable {target.url_env} is not set or empty")
        return value
    assert target.url_file is not None
    path = Path(target.url_file)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise NotifyConfigError(f"{where}.url_file: cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    if not value:
        raise NotifyConfigError(f"{where}.url_file: {path} is empty")
    return value


def _plugin(url: str, asset: apprise.AppriseAsset, where: str, source: str) -> Any:
    """Apprise's plugin for URL with our timeouts (unless the URL sets cto/rto); errors name the source only."""
    import apprise

    plugin = apprise.Apprise.instantiate(url, asset=asset)
    if plugin is None:
        raise NotifyConfigError(f"{where}: Apprise does not accept the URL from {source} ({scheme_of(url)})")
    if not re.search(r"[?&]cto=", url):
        plugin.socket_connect_timeout = CONNECT_TIMEOUT
    if not re.search(r"[?&]rto=", url):
        plugin.socket_read_timeout = READ_TIMEOUT
    return plugin


def check_targets(config: NotificationsConfig, base_dir: Path | None = None) -> None:
    """Raise NotifyConfigError when a target's URL cannot be resolved or Apprise rejects it (daemon start)."""
    Notifier(config, base_dir=base_dir)


class Notifier:
    """Sends event messages to the configured Apprise targets from a background thread; never raises."""

    def __init__(self, config: NotificationsConfig, base_dir: Path | None = None,
                 clock: Callable[[], float] = time.monotonic, queue_size: int = QUEUE_SIZE) -> None:
        _silence_libraries(())  # before Apprise parses anything
        import apprise

        self.config, self.clock = config, clock
        self.rate_limit = float(parse_duration(config.rate_limit))
        self.source_unreachable_after = float(parse_duration(config.source_unreachable_after))
        self.log = structlog.get_logger("reconciler")
        self.counts: Counter[str] = Counter()  # sent, failed, suppressed, filtered, queue-full
        self.targets: list[_Target] = []
        asset = apprise.AppriseAsset()
        for index, target in enumerate(config.targets):
            where = f"notifications.targets[{index}]"
            source = "url" if target.url else f"url_env {target.url_env}" if target.url_env else \
                f"url_file {target.url_file}"
            url = resolve_url(target, where, base_dir)
            _silence_libraries([url])
            app = apprise.Apprise(asset=asset)
            app.add(_plugin(url, asset, where, source))
            events = frozenset(config.events) & frozenset(target.events if target.events is not None else config.events)
            self.targets.append(_Target(scheme_of(url), events, app))
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[Message | None] = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None

    def wants(self, event: str) -> bool:
        """Whether any target takes EVENT."""
        return any(event in t.events for t in self.targets)

    def notify(self, event: str, title: str, body: str, key: str | None = None) -> bool:
        """Queue a message; False when no target wants EVENT, the same event+key was sent within rate_limit,
        or the queue is full. Returns at once: sending happens in the background."""
        if not self.wants(event):
            self.counts["filtered"] += 1
            return False
        now = self.clock()
        ident = (event, key if key is not None else title)
        with self._lock:
            last = self._last.get(ident)
            if last is not None and now - last < self.rate_limit:
                self.counts["suppressed"] += 1
                self.log.debug("notify.suppressed", notify_event=event, reason="same event and key within rate_limit",
                               suppressed=self.counts["suppressed"])
                return False
            self._last[ident] = now
            if len(self._last) > 1000:  # forget what can no longer suppress anything
                self._last = {k: t for k, t in self._last.items() if now - t < self.rate_limit}
            self._start()
            try:
                self._queue.put_nowait(Message(event, title, body, key))
            except queue.Full:
                if last is None:
                    self._last.pop(ident, None)
                else:
                    self._last[ident] = last  # not sent: the next try is not a duplicate
                full = True
            else:
                full = False
        if full:
            self.counts["queue-full"] += 1
            self.log.warning("notify.dropped", notify_event=event, reason="queue full (targets too slow)")
            return False
        return True

    def send(self, message: Message | None) -> bool:
        """notify() with a built Message (None: nothing to send)."""
        return message is not None and self.notify(message.event, message.title, message.body, message.key)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            message = self._queue.get()
            try:
                if message is None:
                    return
                self._send(message)
            finally:
                self._queue.task_done()

    def _send(self, message: Message) -> None:
        import apprise

        notify_type = apprise.NotifyType.FAILURE if message.event in FAILURE_EVENTS else \
            apprise.NotifyType.SUCCESS if message.event == "rollout-finished" else apprise.NotifyType.INFO
        for target in self.targets:
            if message.event not in target.events:
                continue
            try:
                ok = bool(target.app.notify(title=message.title, body=message.body, notify_type=notify_type,
                                            body_format=apprise.NotifyFormat.TEXT))
                error = None if ok else "not delivered"
            except Exception as exc:  # noqa: BLE001 - a notification must never hurt the daemon
                ok, error = False, type(exc).__name__  # the text could quote the URL
            self.counts["sent" if ok else "failed"] += 1
            if ok:
                self.log.info("notify.sent", notify_event=message.event, target=target.label)
            else:
                self.log.warning("notify.failed", notify_event=message.event, target=target.label, error=error)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued message was tried (at most TIMEOUT seconds); True if the queue is empty."""
        until = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (at most TIMEOUT seconds), then stop the thread."""
        self.flush(timeout)
        if self._thread is not None and self._thread.is_alive():
            with contextlib.suppress(queue.Full):  # a daemon thread: it ends with the process anyway
                self._queue.put_nowait(None)


# ---------------------------------------------------------------- message texts


def _short(commit: str | None) -> str:
    return (commit or "?")[:12]


def _fold(nodes: Iterable[str] | str | None) -> str:
    """Node names as one hostlist expression (a string is taken as already folded)."""
    if nodes is None:
        return ""
    if isinstance(nodes, str):
        return nodes
    return hostlist.compress(sorted(set(nodes)))


def _head(cluster: str | None, subject: str | None = None) -> list[str]:
    lines = [f"Cluster: {cluster}"] if cluster else []
    return lines + ([f"Subject: {subject}"] if subject else [])


def rollout_message(kind: str, data: dict[str, Any], cluster: str | None = None,
                    subject: str | None = None) -> Message | None:
    """The message of a rollout event (started, finished, rolled-back); None for per-wave and other kinds."""
    if kind not in ("started", "finished", "rolled-back"):
        return None
    commit = _short(data.get("commit"))
    plan = data.get("waves") or {}
    waves = [w.get("nodeset") or _fold(w.get("nodes")) for w in plan.get("waves") or []]
    gates = ", ".join(plan.get("gates") or []) or "none"
    if kind == "started":
        body = _head(cluster, subject) + [f"{len(waves)} wave(s): {' -> '.join(waves) or '-'}; gates: {gates}",
                                          f"Previous commit: {_short(data.get('previous'))}"]
        return Message("rollout-started", f"reconciler: rolling out commit {commit}", "\n".join(body), commit)
    if kind == "finished":
        body = _head(cluster, subject) + [f"{len(waves)} wave(s) applied and gated: {' -> '.join(waves) or '-'}"]
        return Message("rollout-finished", f"reconciler: commit {commit} rolled out", "\n".join(body), commit)
    gate = data.get("failed_gate") or {}
    rollback = data.get("rollback") or {}
    failed = data.get("status") == "rollback-failed"
    to = _short(rollback.get("to") or data.get("previous"))
    where = f" in wave {data['failed_wave']}" if data.get("failed_wave") else ""
    failure = (f"Gate {gate.get('gate', '?')} failed{where} on {gate.get('nodeset') or _fold(gate.get('nodes')) or '?'}"
               f": {str(gate.get('message') or '')[:500]}")
    if rollback.get("before_image"):
        return _restored_message(commit, failure, rollback, _head(cluster, subject))
    body = _head(cluster, subject) + [
        failure,
        f"Nodes put back on {to}: {_fold(rollback.get('nodes')) or '-'}",
        f"Drains resumed: {_fold(rollback.get('resumed')) or 'none'}",
    ]
    if failed:
        body.append("Rollback errors: " + "; ".join(str(e) for e in rollback.get("errors") or [])[:500])
    body.append(f"The commit is not applied again: push a fix, or `reconciler rollout retry {commit}`.")
    title = f"reconciler: commit {commit} rollback FAILED" if failed else f"reconciler: commit {commit} rolled back"
    return Message("rolled-back", title, "\n".join(body), commit)


def _restored_message(commit: str, failure: str, rollback: dict[str, Any], head: list[str]) -> Message:
    """A first commit's failed rollout: no commit to go back to, so the nodes got back the state found before the
    apply (before-images); the message lists per node what was restored and what was not."""
    lines = rollback_lines(rollback, why=FIRST_COMMIT)
    body = head + [failure, restore_headline(rollback)] + lines[:MAX_RESTORE_LINES]
    if len(lines) > MAX_RESTORE_LINES:
        body.append(f"... and {len(lines) - MAX_RESTORE_LINES} more line(s): `reconciler rollout status`")
    body.append(f"Drains resumed: {_fold(rollback.get('resumed')) or 'none'}")
    body.append(f"The commit is not applied again: push a fix, or `reconciler rollout retry {commit}`.")
    title = (f"reconciler: commit {commit} failed; restore to the state before it INCOMPLETE"
             if rollback.get("not_restored") else f"reconciler: commit {commit} failed; nodes restored to the state "
             "before it")
    return Message("rolled-back", title, "\n".join(body), commit)


def apply_failed_message(commit: str, failures: dict[str, list[str]], error: str | None,
                         cluster: str | None = None, subject: str | None = None) -> Message:
    """An apply (or an ungated rollout) that ended with failures: one message naming the nodes, folded."""
    nodes = _fold(failures)
    lines = [f"{node}: {m}" for node, ms in sorted(failures.items()) for m in ms]
    body = _head(cluster, subject) + [f"Failed on {nodes or 'no node (see the error)'}"] + lines[:10]
    if len(lines) > 10:
        body.append(f"... and {len(lines) - 10} more")
    if error and not lines:
        body.append(error[:500])
    body.append("Retried with backoff; a newer commit is tried at once.")
    return Message("apply-failed", f"reconciler: applying commit {_short(commit)} failed", "\n".join(body),
                   f"{commit}:{nodes}")


def drift_healed_message(commit: str, changes: list[tuple[str, str, str, str]], cluster: str | None = None) -> Message:
    """Drift healed on the applied commit; CHANGES are (node, driver, resource, summary)."""
    nodes = _fold(c[0] for c in changes)
    lines = [f"{node}: {driver} {resource}: {summary}" for node, driver, resource, summary in changes]
    body = _head(cluster) + [f"{len(changes)} drifted resource(s) put back to commit {_short(commit)} on {nodes}"]
    body += lines[:10] + ([f"... and {len(lines) - 10} more"] if len(lines) > 10 else [])
    return Message("drift-healed", f"reconciler: drift healed on {nodes}", "\n".join(body), nodes)


def drained_message(drains: list[tuple[str, str, str | None]], cluster: str | None = None) -> Message:
    """Health checks drained nodes; DRAINS are (node, check, reason)."""
    nodes = _fold(d[0] for d in drains)
    checks = sorted({d[1] for d in drains})
    body = _head(cluster) + [f"Drained by check(s) {', '.join(checks)}: {nodes}"]
    body += [f"{node}: {reason or check}" for node, check, reason in drains[:10]]
    body += [f"... and {len(drains) - 10} more"] if len(drains) > 10 else []
    return Message("node-drained", f"reconciler: health checks drained {nodes}", "\n".join(body), nodes)


def source_message(source: str, error: str | None, since: float | None) -> Message:
    """The Git source failing for longer than source_unreachable_after (ERROR), or reachable again (None)."""
    if error is None:
        return Message("source-unreachable", "reconciler: Git source reachable again",
                       f"Fetching {source} works again.", "up")
    minutes = f" for {int(since // 60)} min" if since is not None else ""
    body = f"Fetching {source} has failed{minutes}; the last good commit stays applied.\nLast error: {error[:500]}"
    return Message("source-unreachable", "reconciler: Git source unreachable", body, "down")


def invalid_commit_message(commit: str, errors: list[str], subject: str | None = None,
                           why: str = "invalid") -> Message:
    """The newest commit does not load, validate or verify; the last good one stays applied."""
    what = "is not signed by an allowed key" if why == "unverified" else "is invalid"
    body = _head(None, subject) + errors[:10] + ([f"... and {len(errors) - 10} more"] if len(errors) > 10 else [])
    body.append("It is not applied; the last good commit stays.")
    return Message("invalid-commit", f"reconciler: commit {_short(commit)} {what}", "\n".join(body), commit)


def promotion_message(title: str, lines: list[str], cluster: str | None, key: str) -> Message:
    """A promotion event of CLUSTER: held, released, gone back, a hotfix applied or refused, an approval needed."""
    return Message("promotion", f"reconciler: {cluster or 'cluster'}: {title}", "\n".join(_head(cluster) + lines),
                   f"{cluster}:{key}:{title}")


def rma_message(found: list[tuple[Any, Any]], cluster: str | None) -> Message:
    """GPUs that became RMA candidates: (standing, rule met) each (checks/fleet/rank.py)."""
    lines = [f"{s.node} GPU {s.index} {s.uuid} (serial {s.serial or '-'}): {h.rule}: {h.detail}" for s, h in found]
    title = (f"reconciler: GPU {found[0][0].node}/{found[0][0].index} is an RMA candidate" if len(found) == 1
             else f"reconciler: {len(found)} GPUs are RMA candidates")
    body = _head(cluster) + lines[:20] + [f"... and {len(lines) - 20} more" if len(lines) > 20 else "",
                                          "History: reconciler gpus UUID"]
    return Message("gpu-rma", title, "\n".join(line for line in body if line), ",".join(s.uuid for s, _ in found))
