"""The daemon's forge settings, where the token comes from, and the forge client they make."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reconciler.forge.base import Forge, Secret, Sleep


class ForgeConfig(BaseModel):
    """Which forge holds the desired-state repository, and how to reach it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["github", "gitlab", "gitea"] = Field(description="github (also GHES), gitlab, gitea (also Forgejo)")
    url: str | None = Field(default=None, description=(
        "API root: https://api.github.com (default), https://HOST/api/v3 for GitHub Enterprise, "
        "https://gitlab.com (default for gitlab), https://HOST/api/v1 for Gitea/Forgejo (required)"))
    repo: str = Field(description="owner/name (GitLab: the project path, group/subgroup/name, or its id)")
    token_env: str | None = Field(default=None, description="Environment variable holding the API token")
    token_file: str | None = Field(default=None, description="File holding the API token (first line)")
    per_page: int = Field(default=50, ge=1, le=100)
    max_rate_limit_wait: float = Field(default=300.0, ge=0,
                                       description="Longest wait for a rate limit reset; longer: next cycle")
    timeout: float = 30.0

    @model_validator(mode="after")
    def _one_token_source(self) -> ForgeConfig:
        if bool(self.token_env) == bool(self.token_file):
            raise ValueError("set exactly one of token_env and token_file")
        if self.type == "gitea" and not self.url:
            raise ValueError("a gitea forge needs url (e.g. https://gitea.example.com/api/v1)")
        return self


class TokenError(Exception):
    """The token could not be read (the message names where it was looked for, never its value)."""


def load_token(token_env: str | None = None, token_file: str | Path | None = None) -> Secret:
    """The API token from an environment variable or the first line of a file."""
    if token_env:
        value = os.environ.get(token_env, "").strip()
        if not value:
            raise TokenError(f"environment variable {token_env} is not set or empty")
        return Secret(value)
    if token_file:
        try:
            lines = Path(token_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise TokenError(f"cannot read token file {token_file}: {exc.strerror}") from None
        value = lines[0].strip() if lines else ""
        if not value:
            raise TokenError(f"token file {token_file} is empty")
        return Secret(value)
    raise TokenError("no token source: set token_env or token_file")


class ForgeSettings(Protocol):
    """What make_forge reads: ForgeConfig here, or the daemon's own forge section (same field names)."""

    @property
    def type(self) -> str:
        """github, gitlab or gitea."""

    @property
    def url(self) -> str | None:
        """The API root."""

    @property
    def repo(self) -> str:
        """owner/name or the GitLab project path."""

    @property
    def token_env(self) -> str | None:
        """Environment variable holding the token."""

    @property
    def token_file(self) -> str | None:
        """File holding the token."""


def make_forge(config: ForgeSettings, *, sleep: Sleep = time.sleep) -> Forge:
    """The forge client CONFIG describes, with its token loaded (per_page, timeout... when it has them)."""
    token = load_token(config.token_env, config.token_file)
    timeout = float(getattr(config, "timeout", 30.0))
    common: dict[str, Any] = {"per_page": int(getattr(config, "per_page", 50)), "sleep": sleep,
                              "max_rate_limit_wait": float(getattr(config, "max_rate_limit_wait", 300.0))}
    if config.type == "github":
        from reconciler.forge.github import DEFAULT_URL, GitHubForge

        return GitHubForge(config.url or DEFAULT_URL, config.repo, token, timeout=int(timeout), **common)
    if config.type == "gitlab":
        from reconciler.forge.gitlab import DEFAULT_URL as GITLAB_URL
        from reconciler.forge.gitlab import GitLabForge

        return GitLabForge(config.url or GITLAB_URL, config.repo, token, timeout=timeout, **common)
    if config.type == "gitea":
        from reconciler.forge.gitea import GiteaForge

        if not config.url:
            raise ValueError("a gitea forge needs url (e.g. https://gitea.example.com/api/v1)")
        return GiteaForge(config.url, config.repo, token, timeout=timeout, **common)
    raise ValueError(f"unknown forge type {config.type!r} (github, gitlab, gitea)")
