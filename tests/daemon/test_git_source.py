"""The Git source on real repositories: follow the branch, force-pushes, unreachable remote, signed commits."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from reconciler.daemon import logs
from reconciler.daemon.config import DaemonConfig, RepositoryConfig, SigningPolicy
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.store import Store
from tests.daemon.harness import GitRemote, git

EXAMPLE = Path(__file__).resolve().parents[2] / "desired-state"


@pytest.fixture
def remote(tmp_path: Path) -> GitRemote:
    """A bare repo holding the bundled example desired state."""
    return GitRemote.create(tmp_path, EXAMPLE)


def test_follows_head_and_force_push(remote: GitRemote, tmp_path: Path) -> None:
    """fetch() returns the branch head; after a force-push, the rewritten head (reset, not merged)."""
    source = GitSource(RepositoryConfig(url=str(remote.bare)), tmp_path / "clone")
    first = remote.head()
    assert source.fetch().head == first
    second = remote.commit("more", {"README.md": lambda t: t + "\nmore\n"})
    assert source.fetch().head == second
    git(remote.work, "reset", "-q", "--hard", first)
    (remote.work / "other.md").write_text("x\n")
    git(remote.work, "add", "-A")
    git(remote.work, "commit", "-qm", "rewritten")
    git(remote.work, "push", "-q", "--force", "origin", "main")
    rewritten = remote.head()
    fetched = source.fetch()
    assert fetched.head == rewritten and fetched.error is None
    directory = source.checkout(rewritten)
    assert (directory / "other.md").exists()
    assert "more" not in (directory / "README.md").read_text()
    assert git(source.path, "rev-parse", "HEAD") == rewritten


def test_unreachable_remote_keeps_last_head(remote: GitRemote, tmp_path: Path) -> None:
    """A vanished remote is an error, and the last fetched head is kept."""
    source = GitSource(RepositoryConfig(url=str(remote.bare)), tmp_path / "clone")
    head = source.fetch().head
    shutil.move(str(remote.bare), str(tmp_path / "gone.git"))
    fetched = source.fetch()
    assert fetched.head == head
    assert fetched.error and "gone.git" not in fetched.error


def test_subdir_and_credentials_redacted() -> None:
    """Tokens embedded in URLs never reach messages."""
    assert logs.redact_url_credentials("fatal: https://x-access-token:ghp_SECRET123@github.com/o/r.git") == \
        "fatal: https://***@github.com/o/r.git"
    assert RepositoryConfig(url="u", subdir="clusters/a/").subdir == "clusters/a"
    with pytest.raises(ValueError, match="relative path"):
        RepositoryConfig(url="u", subdir="../etc")


def test_log_processor_scrubs_secrets() -> None:
    """structlog output never holds tokens, passwords or private keys."""
    stream = io.StringIO()
    logs.configure("json", stream)
    logs.get_logger().info("x", token="ghp_abc", url="https://u:pw@host/r", note="Authorization: Bearer abcdefgh12345",
                           key="-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----")
    line = json.loads(stream.getvalue())
    text = stream.getvalue()
    assert line["token"] == "***" and "ghp_abc" not in text and ":pw@" not in text and "abcdefgh12345" not in text
    assert "AAAA" not in text


def _ssh_key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "admin", "-f", str(path)], check=True)
    return path


def _signed_commit(remote: GitRemote, key: Path | None, name: str) -> str:
    (remote.work / f"{name}.md").write_text(name + "\n")
    git(remote.work, "add", "-A")
    args = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-qS", "-m", name] if key \
        else ["commit", "-qm", name]
    git(remote.work, *args)
    git(remote.work, "push", "-q", "origin", "main")
    return remote.head()


def test_ssh_signature_policy(remote: GitRemote, tmp_path: Path) -> None:
    """Only commits signed by a key in allowed_signers pass; unsigned and foreign-signed ones are refused."""
    good, bad = _ssh_key(tmp_path / "good"), _ssh_key(tmp_path / "bad")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"admin@example.org {(tmp_path / 'good.pub').read_text()}")
    policy = SigningPolicy(format="ssh", allowed_signers=str(allowed))
    source = GitSource(RepositoryConfig(url=str(remote.bare)), tmp_path / "clone", policy)
    signed = _signed_commit(remote, good, "signed")
    source.fetch()
    assert source.verify(signed) is None
    unsigned = _signed_commit(remote, None, "unsigned")
    foreign = _signed_commit(remote, bad, "foreign")
    source.fetch()
    assert "not signed by an allowed key" in (source.verify(unsigned) or "")
    assert "not signed by an allowed key" in (source.verify(foreign) or "")


def test_unsigned_head_is_reported_and_not_used(remote: GitRemote, tmp_path: Path) -> None:
    """The daemon keeps the last signed commit as its target and records the unsigned head."""
    key = _ssh_key(tmp_path / "good")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"admin@example.org {(tmp_path / 'good.pub').read_text()}")
    signed = _signed_commit(remote, key, "signed")
    config = DaemonConfig.model_validate({"repository": {"url": str(remote.bare)}, "state_dir": str(tmp_path / "s"),
                                          "signing": {"format": "ssh", "allowed_signers": str(allowed)}})
    store = Store(tmp_path / "s" / "state.db")
    reconciler = Reconciler(config, store, Metrics(), threading.Event())
    target, new = reconciler.targets.resolve_git()
    assert target is not None and target.commit == signed and new
    unsigned = _signed_commit(remote, None, "sneaky")
    target, new = reconciler.targets.resolve_git()
    assert target is not None and target.commit == signed and not new
    head = store.get("head_status")
    assert head["commit"] == unsigned and head["status"] == "unverified"
    assert store.runs(1)[0].outcome == "unverified"
    assert not (reconciler.source.path / "sneaky.md").exists()  # type: ignore[union-attr]


def test_invalid_head_keeps_good_commit(remote: GitRemote, tmp_path: Path) -> None:
    """A commit that fails validation is recorded with file:line; the target stays the last good commit."""
    config = DaemonConfig.model_validate({"repository": {"url": str(remote.bare)}, "state_dir": str(tmp_path / "s")})
    store = Store(tmp_path / "s" / "state.db")
    reconciler = Reconciler(config, store, Metrics(), threading.Event())
    good = remote.head()
    assert reconciler.targets.resolve_git()[0].commit == good  # type: ignore[union-attr]
    bad = remote.commit("break", {"cluster.yaml": lambda t: t + "bogus_key: 1\n"})
    target, new = reconciler.targets.resolve_git()
    assert target is not None and target.commit == good and not new
    head = store.get("head_status")
    assert head["commit"] == bad and head["status"] == "invalid"
    lines = (remote.work / "cluster.yaml").read_text().splitlines()
    assert any(e.startswith(f"cluster.yaml:{len(lines)}:") and "bogus_key" in e for e in head["errors"])
    fixed = remote.commit("fix", {"cluster.yaml": lambda t: t.replace("bogus_key: 1\n", "")})
    target, new = reconciler.targets.resolve_git()
    assert target is not None and target.commit == fixed and new
