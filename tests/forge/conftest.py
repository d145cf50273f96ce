"""Fixtures for the forge tests: the fake GitHub server, a real Git origin with PR refs, synthesised facts."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from reconciler.desired.loader import LoadedState, load_dir
from reconciler.desired.source import describe_source
from reconciler.drivers import converged as synthetic
from reconciler.engine.context import Context
from reconciler.facts.models import ClusterFacts
from reconciler.forge.base import Secret
from reconciler.forge.github import GitHubForge
from reconciler.forge.pr_plan import _MEMORY
from tests.engine.testbed_state import write_state
from tests.forge.fake_github import FakeGitHub

TOKEN = "ghp_TESTtoken0123456789abcdefSECRET"
SUBDIR = "desired-state"


@pytest.fixture(autouse=True)
def _fresh_memory_cache() -> Iterator[None]:
    """report_pull_requests without a database keeps its cache in memory, per process: start each test empty."""
    _MEMORY.clear()
    yield
    _MEMORY.clear()


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    """A running fake GitHub (GHES-style /api/v3) for repository acme/cluster."""
    server = FakeGitHub(token=TOKEN)
    with server.running():
        yield server


class Sleeps(list[float]):
    """Records every sleep instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    """The sleeps the forge client asked for."""
    return Sleeps()


@pytest.fixture
def forge(fake: FakeGitHub, sleeps: Sleeps) -> GitHubForge:
    """PyGithub against the fake server, without pacing, with recorded sleeps."""
    return GitHubForge(fake.base_url, "acme/cluster", Secret(TOKEN), throttle=False, sleep=sleeps)


def run_git(cwd: Path, *args: str) -> str:
    """Run git in CWD (a test repository, never the project's)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class Origin:
    """A bare origin repository, an author's clone, and the daemon's clone; PR heads at refs/pull/N/head."""

    def __init__(self, tmp: Path) -> None:
        self.bare = tmp / "origin.git"
        self.work = tmp / "work"
        run_git(tmp, "init", "--quiet", "--bare", "-b", "main", str(self.bare))
        run_git(tmp, "clone", "--quiet", str(self.bare), str(self.work))
        run_git(self.work, "config", "user.email", "admin@example.com")
        run_git(self.work, "config", "user.name", "Admin")
        run_git(self.work, "checkout", "--quiet", "-b", "main")
        self.state_dir = tmp / "testbed-state"
        self.daemon_dir = tmp / "daemon"
        self._daemon: git.Repo | None = None

    def write(self, rel: str, text: str) -> None:
        """Write a file in the author's clone."""
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def edit(self, rel: str, old: str, new: str) -> None:
        """Replace OLD by NEW in a file of the author's clone (OLD must be there)."""
        path = self.work / rel
        text = path.read_text()
        assert old in text, f"{old!r} not in {rel}"
        path.write_text(text.replace(old, new))

    def commit(self, message: str) -> str:
        """Commit everything; return the sha."""
        run_git(self.work, "add", "-A")
        run_git(self.work, "commit", "--quiet", "--allow-empty", "-m", message)
        return run_git(self.work, "rev-parse", "HEAD")

    def branch(self, name: str, start: str = "main") -> None:
        """Start (or reset) a branch in the author's clone."""
        run_git(self.work, "checkout", "--quiet", "-B", name, start)

    def push_main(self) -> str:
        """Push main; return its sha."""
        run_git(self.work, "push", "--quiet", "origin", "main:refs/heads/main")
        return run_git(self.work, "rev-parse", "main")

    def push_pr(self, number: int, sha: str, ref: str = "") -> None:
        """What GitHub does on a push to a PR branch: move refs/pull/N/head (or REF: GitLab's own)."""
        run_git(self.work, "push", "--quiet", "--force", "origin", f"{sha}:{ref or f'refs/pull/{number}/head'}")

    @property
    def daemon(self) -> git.Repo:
        """The daemon's clone (made on first use, pulled on every use)."""
        if self._daemon is None:
            self._daemon = git.Repo.clone_from(str(self.bare), str(self.daemon_dir))
        else:
            self._daemon.remotes.origin.pull("main")
        return self._daemon

    def base(self) -> LoadedState:
        """The main branch's desired state, loaded from the daemon's clone."""
        repo = self.daemon
        return load_dir(Path(repo.working_dir) / SUBDIR, commit=repo.head.commit.hexsha)


@pytest.fixture
def origin(tmp_path: Path) -> Origin:
    """An origin whose main holds the testbed desired state (ctl + gpu[01-02], Slurm 22.05)."""
    repo = Origin(tmp_path)
    write_state(repo.work / SUBDIR, name="rtpr", state_dir=repo.state_dir, subnet="10.250.7", computes="gpu[01-02]")
    repo.write("README.md", "cluster repo\n")
    repo.commit("desired state")
    repo.push_main()
    return repo


def converged_facts(loaded: LoadedState) -> ClusterFacts:
    """Facts of a cluster that already matches LOADED (no SSH): what gather would read after an apply."""
    return synthetic.converged_facts(Context(loaded=loaded, source=describe_source(loaded.root, loaded.commit)))
