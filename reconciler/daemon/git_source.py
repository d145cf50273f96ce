"""The desired state's Git repository: clone, fetch, follow the branch head (force-pushes too), verify."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import git

from reconciler.daemon.config import RepositoryConfig, SigningPolicy
from reconciler.daemon.logs import redact_url_credentials

GIT_TIMEOUT = 120
_VALIDSIG = re.compile(r"^\[GNUPG:\] VALIDSIG (?P<fpr>[0-9A-F]+)", re.MULTILINE)


@dataclass
class FetchResult:
    """The remote branch head after a fetch, or the last known one with the error that kept it."""

    head: str | None
    error: str | None = None


class GitSource:
    """A clone of the desired-state repository under the daemon's state directory."""

    def __init__(self, repo_cfg: RepositoryConfig, path: Path, signing: SigningPolicy | None = None) -> None:
        self.cfg, self.path, self.signing = repo_cfg, path, signing
        self._repo: git.Repo | None = None

    @property
    def remote_ref(self) -> str:
        """The remote-tracking ref of the followed branch."""
        return f"refs/remotes/origin/{self.cfg.branch}"

    @property
    def desired_dir(self) -> Path:
        """The desired-state directory inside the work tree."""
        return self.path / self.cfg.subdir if self.cfg.subdir else self.path

    @property
    def repo(self) -> git.Repo:
        """The GitPython repository (cloned on first use)."""
        if self._repo is None:
            self._repo = self._open_or_clone()
        return self._repo

    def _env(self) -> dict[str, str]:
        ssh = os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        return {"GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": ssh}

    def _open_or_clone(self) -> git.Repo:
        if (self.path / ".git").is_dir():
            repo = git.Repo(self.path)
            if repo.remotes and repo.remotes.origin.url != self.cfg.url:
                repo.remotes.origin.set_url(self.cfg.url)
            return repo
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Clone into a temporary name so that a crash never leaves a half clone at the real path.
        tmp = self.path.with_name(self.path.name + ".cloning")
        shutil.rmtree(tmp, ignore_errors=True)
        git.Repo.clone_from(self.cfg.url, tmp, env=self._env(), no_checkout=True, kill_after_timeout=GIT_TIMEOUT)
        tmp.rename(self.path)
        return git.Repo(self.path)

    def fetch(self) -> FetchResult:
        """Fetch the branch (forced: history rewrites are followed); on failure keep the last known head."""
        try:
            repo = self.repo
            with repo.git.custom_environment(**self._env()):
                repo.git.fetch("origin", f"+refs/heads/{self.cfg.branch}:{self.remote_ref}", "--no-tags",
                               "--prune", kill_after_timeout=GIT_TIMEOUT)
            return FetchResult(repo.commit(self.remote_ref).hexsha)
        except (git.GitCommandError, git.exc.GitError, OSError, ValueError) as exc:
            return FetchResult(self.last_known_head(), redact_url_credentials(_short_error(exc)))

    def last_known_head(self) -> str | None:
        """The remote branch head from the last successful fetch, if any."""
        try:
            return self.repo.commit(self.remote_ref).hexsha
        except (git.exc.GitError, ValueError, OSError):
            return None

    def checkout(self, sha: str) -> Path:
        """Make the work tree exactly `sha` (reset --hard, clean), never merging; return the desired dir."""
        repo = self.repo
        repo.git.reset("--hard", sha)
        repo.git.clean("-ffdx")
        return self.desired_dir

    def subject(self, sha: str) -> str:
        """The first line of a commit's message."""
        return str(self.repo.commit(sha).summary)

    def verify(self, sha: str) -> str | None:
        """None when the commit is signed by an allowed key (or no policy is set), else why not."""
        if self.signing is None:
            return None
        policy = self.signing
        try:
            if policy.format == "ssh":
                self.repo.git.execute(["git", "-c", "gpg.format=ssh", "-c",
                                       f"gpg.ssh.allowedSignersFile={policy.allowed_signers}",
                                       "verify-commit", sha], with_extended_output=True)
                return None
            env = {**os.environ, "GNUPGHOME": str(policy.gnupg_home)}
            _, _, stderr = self.repo.git.execute(["git", "verify-commit", "--raw", sha], env=env,
                                                 with_extended_output=True)
        except git.GitCommandError as exc:
            return f"commit {sha[:12]} is not signed by an allowed key: {_short_error(exc)}"
        fingerprints = set(_VALIDSIG.findall(str(stderr)))
        allowed = {k.replace(" ", "").upper() for k in policy.allowed_keys}
        if allowed and not fingerprints & allowed:
            return f"commit {sha[:12]} is signed by {', '.join(sorted(fingerprints)) or 'no key'}, not an allowed key"
        return None


def _short_error(exc: Exception) -> str:
    if isinstance(exc, git.GitCommandError):
        text = str(exc.stderr or exc).strip().strip("'").strip()
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("stderr:")]
        return " ".join(lines)[-400:] or f"git exited {exc.status}"
    return str(exc)[-400:]
