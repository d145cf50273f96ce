"""Code forges (GitHub, GitLab, Gitea/Forgejo): open pull requests and the one plan comment on each."""

from __future__ import annotations

from reconciler.forge.base import (
    Comment,
    Forge,
    ForgeError,
    PullRequest,
    Secret,
    Upserted,
    redact,
)
from reconciler.forge.config import ForgeConfig, ForgeSettings, TokenError, load_token, make_forge

__all__ = ["Comment", "Forge", "ForgeConfig", "ForgeError", "ForgeSettings", "PullRequest", "Secret", "TokenError",
           "Upserted", "load_token", "make_forge", "redact"]
