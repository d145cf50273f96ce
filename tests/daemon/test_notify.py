"""Notifications through real Apprise to a local json:// receiver: filters, de-duplication, rate limit, secrets,
timeouts, and the daemon loop's events (rollback, checks' drains, invalid commits, an unreachable Git source)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from structlog.testing import capture_logs

from reconciler.daemon.config import NOTIFY_EVENTS, DaemonConfig, NotificationsConfig, load_config
from reconciler.daemon.loop import Reconciler, Target
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Notifier, NotifyConfigError, drained_message, scheme_of
from reconciler.daemon.store import Store
from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.engine.workload import GateResult
from reconciler.rollout.runner import RolloutResult
from reconciler.rollout.waves import Wave, WavePlan
from tests.checks.fake_cluster import FakeCluster
from tests.checks.test_runner import loaded as checks_state
from tests.daemon.harness import GitRemote, write_config

REPO = Path(__file__).resolve().parents[2]
TOKEN = "xoxb-S3CRETT0KEN-4242"  # noqa: S105 - a fake secret the tests hunt for
CONTROL = "C0NTR0L-N0T-A-TARGET"


class Receiver:
    """An HTTP server on 127.0.0.1 recording what Apprise's json:// posts (path, body); 500 for paths with /fail."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        received = self.messages

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                received.append({"path": self.path, **body})
                self.send_response(500 if "/fail" in self.path else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, path: str = "") -> str:
        """The Apprise URL of PATH on this receiver."""
        return f"json://127.0.0.1:{self.port}/{path}"

    def on(self, path: str) -> list[dict[str, Any]]:
        """Messages posted to PATH."""
        return [m for m in self.messages if m["path"].rstrip("/") == "/" + path.strip("/")]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.server.shutdown()


def notifier(*targets: dict[str, Any], **options: Any) -> Notifier:
    return Notifier(NotificationsConfig.model_validate({"targets": list(targets), **options}))


def sent(n: Notifier) -> Notifier:
    assert n.flush(10), "messages still queued after 10 s"
    return n


# ---------------------------------------------------------------- the Notifier


def test_message_arrives_with_title_and_body(receiver: Receiver) -> None:
    n = notifier({"url": receiver.url("hook")})
    assert n.notify("rolled-back", "reconciler: commit abc rolled back", "gate smoke-job failed on gpu[01-02]")
    sent(n)
    assert [(m["title"], m["message"], m["type"]) for m in receiver.messages] == [
        ("reconciler: commit abc rolled back", "gate smoke-job failed on gpu[01-02]", "failure")]
    assert n.counts["sent"] == 1 and n.counts["failed"] == 0


def test_event_filter_per_target_and_globally(receiver: Receiver) -> None:
    n = notifier({"url": receiver.url("oncall"), "events": ["rolled-back"]}, {"url": receiver.url("all")},
                 events=[e for e in NOTIFY_EVENTS if e != "drift-healed"])
    assert n.notify("node-drained", "drained", "gpu01")
    assert n.notify("rolled-back", "rolled back", "x")
    assert not n.notify("drift-healed", "healed", "y")  # no target takes it
    sent(n)
    assert [m["title"] for m in receiver.on("oncall")] == ["rolled back"]
    assert sorted(m["title"] for m in receiver.on("all")) == ["drained", "rolled back"]
    assert n.counts["filtered"] == 1


def test_same_event_and_key_twice_is_one_message(receiver: Receiver) -> None:
    n = notifier({"url": receiver.url()})
    assert n.notify("apply-failed", "failed", "first", key="c1")
    assert not n.notify("apply-failed", "failed", "second", key="c1")
    assert n.notify("apply-failed", "failed", "other commit", key="c2")
    assert n.notify("invalid-commit", "other event", "same key", key="c1")
    assert n.notify("node-drained", "t", "no key: the title is the key")
    assert not n.notify("node-drained", "t", "same title")
    sent(n)
    assert [m["message"] for m in receiver.messages] == ["first", "other commit", "same key",
                                                         "no key: the title is the key"]
    assert n.counts["suppressed"] == 2


def test_rate_limit_spaces_messages_of_one_key(receiver: Receiver) -> None:
    now = [1000.0]
    n = Notifier(NotificationsConfig.model_validate({"targets": [{"url": receiver.url()}], "rate_limit": "1m"}),
                 clock=lambda: now[0])
    assert n.notify("drift-healed", "healed", "t=0", key="gpu01")
    now[0] += 59
    assert not n.notify("drift-healed", "healed", "t=59", key="gpu01")
    now[0] += 2
    assert n.notify("drift-healed", "healed", "t=61", key="gpu01")
    sent(n)
    assert [m["message"] for m in receiver.messages] == ["t=0", "t=61"]
    unlimited = notifier({"url": receiver.url()}, rate_limit=0)
    assert unlimited.notify("drift-healed", "a", "b") and unlimited.notify("drift-healed", "a", "b")


def test_url_env_and_url_file(receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_TEST_HOOK", receiver.url("from-env"))
    (tmp_path / "hook-url").write_text(f"  {receiver.url('from-file')}\n")
    config = NotificationsConfig.model_validate({"targets": [{"url_env": "RECONCILER_TEST_HOOK"},
                                                             {"url_file": "hook-url"}]})
    n = Notifier(config, base_dir=tmp_path)  # a relative url_file is beside the config file
    assert [t.label for t in n.targets] == ["json://…", "json://…"]
    sent(n).notify("invalid-commit", "bad", "body")
    sent(n)
    assert len(receiver.on("from-env")) == 1 and len(receiver.on("from-file")) == 1


def test_missing_variable_or_file_is_an_error_naming_it_never_the_value(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILER_NO_SUCH_VAR", raising=False)
    with pytest.raises(NotifyConfigError, match=r"targets\[0\]\.url_env: environment variable RECONCILER_NO_SUCH_VAR"):
        notifier({"url_env": "RECONCILER_NO_SUCH_VAR"})
    with pytest.raises(NotifyConfigError, match=r"targets\[1\]\.url_file: cannot read .*/absent"):
        notifier({"url": "json://localhost/"}, {"url_file": str(tmp_path / "absent")})
    monkeypatch.setenv("RECONCILER_BAD_URL", f"nosuchservice://{TOKEN}@host/{TOKEN}")
    with pytest.raises(NotifyConfigError) as info:
        notifier({"url_env": "RECONCILER_BAD_URL"})
    assert "RECONCILER_BAD_URL" in str(info.value) and TOKEN not in str(info.value), info.value
    assert scheme_of(f"slack://{TOKEN}/B/C") == "slack://…"

    # `reconciler run` stops before anything starts, with the variable's name (exit 2).
    config = write_config(tmp_path / "config.yaml", watch=str(tmp_path), state_dir=str(tmp_path / "state"),
                          metrics_listen=None, notifications={"targets": [{"url_env": "RECONCILER_NO_SUCH_VAR"}]})
    env = {k: v for k, v in os.environ.items() if k != "RECONCILER_NO_SUCH_VAR"}
    out = subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--config", str(config), "--once"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "environment variable RECONCILER_NO_SUCH_VAR is not set" in out.stderr
    assert not (tmp_path / "state").exists()


def test_config_rejects_credentials_in_url_and_unknown_events(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"watch: {tmp_path}\nnotifications:\n  targets:\n    - url: json://me:{TOKEN}@h/x\n"
                    f"    - url_env: A\n      url_file: b\n  events: [rolled-back, lunch]\n")
    with pytest.raises(DesiredStateError) as info:
        load_config(path)
    errors = [str(e) for e in info.value.errors]
    assert any(":4:" in e and "url holds credentials" in e for e in errors), errors
    assert any("exactly one of url, url_env, url_file" in e for e in errors), errors
    assert any("unknown event(s) lunch" in e for e in errors), errors
    assert TOKEN not in "\n".join(errors)


def test_example_config_notifications_block_is_valid() -> None:
    """The commented `notifications:` example of deploy/config.example.yaml loads once uncommented."""
    text = (REPO / "deploy" / "config.example.yaml").read_text().splitlines()
    start = text.index("# notifications:")
    block = []
    for line in text[start:]:
        if not line.startswith("#"):
            break
        block.append(line[2:])
    data = YAML(typ="safe").load("\n".join(block))
    config = DaemonConfig.model_validate({"watch": "/tmp", **data})
    assert config.notifications is not None and len(config.notifications.targets) == 3
    assert config.notifications.events == list(NOTIFY_EVENTS)


def test_secrets_never_reach_logs(receiver: Receiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                  capfd: pytest.CaptureFixture[str]) -> None:
    """A token in the URL (user info and path) is in no log record, structlog event, stdout or stderr."""
    apprise_logger = logging.getLogger("apprise")
    saved = apprise_logger.level, apprise_logger.propagate
    apprise_logger.setLevel(logging.DEBUG)  # as chatty as it gets: Apprise logs the POST URL at debug
    apprise_logger.propagate = True
    caplog.set_level(logging.DEBUG)  # the root logger too: urllib3 logs request lines (with the path) at debug
    try:
        monkeypatch.setenv("RECONCILER_TEST_HOOK", f"json://bot:{TOKEN}@127.0.0.1:{receiver.port}/ok/{TOKEN}")
        monkeypatch.setenv("RECONCILER_TEST_FAIL", f"json://bot:{TOKEN}@127.0.0.1:{receiver.port}/fail/{TOKEN}")
        with capture_logs() as events:
            n = notifier({"url_env": "RECONCILER_TEST_HOOK"}, {"url_env": "RECONCILER_TEST_FAIL"})
            assert n.notify("apply-failed", "reconciler: applying commit abc failed", "gpu01: boom")
            sent(n)
        # control: this capture does see urllib3's debug records (those not quoting a target)
        logging.getLogger("urllib3.connectionpool").debug('http://example.org:80 "POST /%s HTTP/1.1" 200', CONTROL)
        assert any(CONTROL in r.getMessage() for r in caplog.records if r.name.startswith("urllib3"))
    finally:
        apprise_logger.setLevel(saved[0])
        apprise_logger.propagate = saved[1]
    assert [m["path"].split("/")[1] for m in receiver.messages] == ["ok", "fail"]
    assert n.counts["sent"] == 1 and n.counts["failed"] == 1
    assert {(e["event"], e["target"]) for e in events if e["event"].startswith("notify.")} == {
        ("notify.sent", "json://…"), ("notify.failed", "json://…")}
    out, err = capfd.readouterr()
    leaks = [r.getMessage() for r in caplog.records if TOKEN in r.getMessage()]
    assert not leaks, leaks
    assert TOKEN not in repr(events) and TOKEN not in out and TOKEN not in err
    assert not [r for r in caplog.records if r.name.startswith("apprise")]


def test_unreachable_target_does_not_stall_notify(receiver: Receiver) -> None:
    """A target that accepts connections and never answers: notify() returns at once, the send times out."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accept()ed: connects succeed, no answer ever comes
    try:
        n = Notifier(NotificationsConfig.model_validate(
            {"targets": [{"url": f"json://127.0.0.1:{silent.getsockname()[1]}/?rto=1"}]}), queue_size=3)
        started = time.monotonic()
        results = [n.notify("node-drained", f"drained gpu0{i}", "x") for i in range(6)]
        assert time.monotonic() - started < 2.5  # one blocking send alone would take rto=1 s, three of them 3 s
        assert results.count(True) in (3, 4) and n.counts["queue-full"] == results.count(False)  # bounded queue
        assert not n.flush(0.5)  # still trying: the sender waits, not the caller
        assert n.flush(8)
        assert n.counts["failed"] == results.count(True) and n.counts["sent"] == 0
    finally:
        silent.close()
    fast = notifier({"url": "json://127.0.0.1:1/"})  # connection refused
    started = time.monotonic()
    fast.notify("apply-failed", "t", "b")
    assert sent(fast).counts["failed"] == 1 and time.monotonic() - started < 3


# ---------------------------------------------------------------- the daemon loop's events


def reconciler_for(tmp_path: Path, receiver: Receiver, **config: Any) -> Reconciler:
    values: dict[str, Any] = {"watch": str(tmp_path / "desired"), "mode": "enforce", "metrics_listen": None,
                              "state_dir": str(tmp_path / "state"),
                              "notifications": {"targets": [{"url": receiver.url()}]}}
    values.update(config)
    cfg = DaemonConfig.model_validate(values)
    cfg.state_path.mkdir(parents=True, exist_ok=True)
    return Reconciler(cfg, Store(cfg.state_path / "state.db"), Metrics(), threading.Event(), config_dir=tmp_path)


def rolled_back_data(commit: str, previous: str) -> dict[str, Any]:
    """What the rollout runner hands to the rolled-back event (RolloutResult.as_dict)."""
    waves = WavePlan([Wave(1, "canary", ["gpu01", "gpu02", "gpu03"]), Wave(2, "rest", ["gpu04", "gpu05"])],
                     gates=["slurm", "smoke-job"])
    gate = GateResult("smoke-job", False, "gpu01: Prolog error; gpu02: Prolog error; gpu03: Prolog error",
                      ["gpu01", "gpu02", "gpu03"])
    result = RolloutResult("rolled-back", commit, previous, waves, failed_wave=1, failed_gate=gate.as_dict(),
                           rollback={"ok": True, "nodes": "gpu[01-03]", "to": previous, "changes": 3,
                                     "resumed": ["gpu03", "gpu01", "gpu02"], "errors": []})
    return result.as_dict()


def test_rollout_events_one_message_each_and_none_per_wave(tmp_path: Path, receiver: Receiver) -> None:
    rec = reconciler_for(tmp_path, receiver)
    commit, previous = "abc123def4567890" + "0" * 24, "fedcba9876543210" + "0" * 24
    loaded = load_dir(REPO / "desired-state")
    target = Target(commit=commit, subject="prolog that fails", loaded=loaded)
    data = rolled_back_data(commit, previous)
    start = {"commit": commit, "previous": previous, "waves": data["waves"], "wave": 0, "phase": "starting"}
    # the runner's sequence for a failed canary: started, wave 1, failed, rolled-back
    rec.apply.rollout_event("started", start, target)
    rec.apply.rollout_event("wave", {"wave": 1, "waves": 2, "name": "canary", "nodes": "gpu[01-03]", "commit": commit},
                       target)
    rec.apply.rollout_event("failed", {**data, "status": "rolled-back", "rollback": None}, target)
    rec.apply.rollout_event("rolled-back", data, target)
    rec.apply.rollout_event("rolled-back", data, target)  # twice (a recovery): still one message
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    titles = [m["title"] for m in receiver.messages]
    assert titles == ["reconciler: rolling out commit abc123def456",
                      "reconciler: commit abc123def456 rolled back"], titles
    body = receiver.messages[1]["message"]
    assert "Gate smoke-job failed in wave 1 on gpu[01-03]" in body, body
    assert "Drains resumed: gpu[01-03]" in body and "Cluster: dgx-pod" in body and "fedcba987654" in body, body
    assert "gpu01," not in body and "gpu01\n" not in body  # nodes folded, not listed one by one
    assert "gpu[01-03] -> gpu[04-05]" in receiver.messages[0]["message"]


def test_checks_that_drain_nodes_send_one_message(tmp_path: Path, receiver: Receiver) -> None:
    rec = reconciler_for(tmp_path, receiver)
    cluster = FakeCluster(["gpu01", "gpu02", "gpu03", "gpu04"])
    cluster.degraded = {"gpu02", "gpu03"}
    rec.checks.run(cluster, checks_state("gpu[01-04]"), None, "schedule", rec.store, lambda: False)
    assert sorted(cluster.reason) == ["gpu02", "gpu03"]
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    assert [m["title"] for m in receiver.messages] == ["reconciler: health checks drained gpu[02-03]"]
    assert "nightly" in receiver.messages[0]["message"]
    cluster.commands.clear()
    rec.checks.run(cluster, checks_state("gpu[01-04]"), None, "schedule", rec.store, lambda: False)
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    assert len(receiver.messages) == 1  # nothing newly drained: no message
    assert drained_message([("gpu1", "c", None), ("gpu2", "c", "r")]).title == "reconciler: health checks drained gpu[1-2]"


def test_invalid_local_content_is_one_message(tmp_path: Path, receiver: Receiver) -> None:
    (tmp_path / "desired").mkdir()
    (tmp_path / "desired" / "cluster.yaml").write_text("cluster: {name: BAD NAME}\n")
    rec = reconciler_for(tmp_path, receiver)
    assert rec.cycle("start") is None and rec.cycle("poll") is None
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    assert len(receiver.messages) == 1, receiver.messages
    assert receiver.messages[0]["title"].startswith("reconciler: commit local:") and \
        receiver.messages[0]["title"].endswith(" is invalid")
    assert "cluster.yaml" in receiver.messages[0]["message"]


def test_unreachable_git_source_one_message_then_quiet_then_recovered(tmp_path: Path, receiver: Receiver) -> None:
    remote = tmp_path / "git"
    rec = reconciler_for(tmp_path, receiver, watch=None, repository={"url": str(remote / "remote.git")},
                         notifications={"targets": [{"url": receiver.url()}], "source_unreachable_after": 0})
    for _ in range(3):
        assert rec.cycle("poll") is None
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    assert [m["title"] for m in receiver.messages] == ["reconciler: Git source unreachable"]
    assert "remote.git" in receiver.messages[0]["message"]
    remote.mkdir()
    desired = tmp_path / "bad-state"
    desired.mkdir()
    (desired / "cluster.yaml").write_text("cluster: {name: BAD NAME}\n")
    head = GitRemote.create(remote, desired).head()
    rec.cycle("poll")
    rec.cycle("poll")
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    assert [m["title"] for m in receiver.messages] == ["reconciler: Git source unreachable",
                                                       "reconciler: Git source reachable again",
                                                       f"reconciler: commit {head[:12]} is invalid"]
    assert "initial desired state" in receiver.messages[2]["message"]


def test_no_notifications_configured_changes_nothing(tmp_path: Path) -> None:
    cfg = DaemonConfig.model_validate({"watch": str(tmp_path), "state_dir": str(tmp_path / "s"), "metrics_listen": None})
    cfg.state_path.mkdir()
    rec = Reconciler(cfg, Store(cfg.state_path / "state.db"), Metrics(), threading.Event())
    assert rec.notices.notifier is None
    rec.notices.rollout("rolled-back", rolled_back_data("a" * 40, "b" * 40), None)  # type: ignore[arg-type]
    rec.targets.watch("fetch failed")
    assert rec.targets.failing_since is None  # not even tracked
