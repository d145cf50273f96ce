"""The daemon's configuration file (`/etc/reconciler/config.yaml`), validated like the desired state."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from reconciler.common.isolate import Limits
from reconciler.desired.loader import load_yaml_model
from reconciler.forge.config import ForgeConfig as ForgeClientConfig
from reconciler.model import Strict, parse_duration, parse_size
from reconciler.model.bounds import (
    DrainTimeout,
    IdleTimeout,
    Interval,
    LeaseDuration,
    PlanCpu,
    PlanWall,
    RenewInterval,
    Spacing,
)


class RepositoryConfig(Strict):
    """Where the desired state lives."""

    url: str = Field(description="Anything `git clone` accepts: https://, ssh://, git@host:path, a local path")
    branch: str = "main"
    subdir: str = Field(default="", description="Directory of the desired state inside the repo")

    @field_validator("subdir")
    @classmethod
    def _relative(cls, value: str) -> str:
        if value.startswith("/") or ".." in Path(value).parts:
            raise ValueError("subdir must be a relative path inside the repository")
        return value.strip("/")


class SigningPolicy(Strict):
    """Only apply commits signed by an allowed key (like Flux's `verify` and `ansible-pull --verify-commit`)."""

    format: Literal["ssh", "gpg"]
    allowed_signers: str | None = Field(default=None, description="ssh: an allowed_signers file")
    gnupg_home: str | None = Field(default=None, description="gpg: a GNUPGHOME holding the trusted public keys")
    allowed_keys: list[str] = Field(default_factory=list, description="gpg: allowed key fingerprints (empty: any "
                                    "key in gnupg_home)")

    @model_validator(mode="after")
    def _complete(self) -> SigningPolicy:
        if self.format == "ssh" and not self.allowed_signers:
            raise ValueError("format ssh needs allowed_signers")
        if self.format == "gpg" and not self.gnupg_home:
            raise ValueError("format gpg needs gnupg_home")
        return self


class SSHOverrides(Strict):
    """SSH settings of the login node that win over the desired state's `ssh:` section."""

    config: str | None = None
    known_hosts: str | None = None
    identity_file: str | None = None
    user: str | None = None
    forks: int | None = Field(default=None, ge=1, le=4096)


class RetryPolicy(Strict):
    """Backoff for a failed apply of the same commit (a newer commit is tried at once)."""

    initial: Interval = "30s"  # type: ignore[valid-type]
    max: Interval = "15m"  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _ordered(self) -> RetryPolicy:
        if parse_duration(self.initial) > parse_duration(self.max):
            raise ValueError(f"initial ({self.initial}) must not exceed max ({self.max})")
        return self


def _plan_memory(value: str | int) -> str | int:
    size = parse_size(value)
    if not 16 << 20 <= size <= 1 << 40:
        raise ValueError(f"must be between 16M and 1T, got {value!r}")
    return value


class PlanLimits(Strict):
    """What validating and planning one pull request may use (a child process under setrlimit)."""

    cpu: PlanCpu = Field(default="60s", description="CPU time")  # type: ignore[valid-type]
    memory: str | int = Field(default="1G", description="Memory on top of the daemon's own")
    wall: PlanWall = Field(default="2m", description="Wall-clock time")  # type: ignore[valid-type]

    _memory = field_validator("memory")(lambda cls, v: _plan_memory(v))

    def limits(self) -> Limits:
        """As reconciler.common.isolate.Limits."""
        return Limits(cpu_seconds=parse_duration(self.cpu), memory_bytes=parse_size(self.memory),
                      wall_seconds=float(parse_duration(self.wall)))


class ForgeConfig(ForgeClientConfig):
    """Where pull requests live (see reconciler/forge/config.py), and how often their drift comments are renewed."""

    interval: Interval = "2m"  # type: ignore[valid-type]
    plan_limits: PlanLimits = Field(default_factory=lambda: PlanLimits())


NOTIFY_EVENTS = ("rollout-started", "rollout-finished", "rolled-back", "node-drained", "apply-failed", "drift-healed",
                 "source-unreachable", "invalid-commit", "promotion", "gpu-rma")


def _events(values: list[str]) -> list[str]:
    unknown = [v for v in values if v not in NOTIFY_EVENTS]
    if unknown:
        raise ValueError(f"unknown event(s) {', '.join(unknown)}; known: {', '.join(NOTIFY_EVENTS)}")
    return values


class NotifyTarget(Strict):
    """One Apprise destination: exactly one of url, url_env, url_file (secrets belong in the last two)."""

    url: str | None = Field(default=None, description="An Apprise URL without secrets, e.g. json://host:8080/hook")
    url_env: str | None = Field(default=None, description="Name of an environment variable holding the URL")
    url_file: str | None = Field(default=None, description="File whose content (stripped) is the URL")
    events: list[str] | None = Field(default=None, description="Only these events (default: the section's events)")

    _events = field_validator("events")(lambda cls, v: v if v is None else _events(v))

    @model_validator(mode="after")
    def _one_url(self) -> NotifyTarget:
        if sum(v is not None for v in (self.url, self.url_env, self.url_file)) != 1:
            raise ValueError("give exactly one of url, url_env, url_file")
        if self.url is not None and re.match(r"^[a-z][a-z0-9+.-]*://[^/?#]*@", self.url, re.IGNORECASE):
            raise ValueError("url holds credentials: put it in url_env or url_file")
        return self


class NotificationsConfig(Strict):
    """Messages to chat, e-mail or webhooks through Apprise (https://github.com/caronc/apprise)."""

    targets: list[NotifyTarget] = Field(min_length=1)
    events: list[str] = Field(default_factory=lambda: list(NOTIFY_EVENTS), description="Events sent (default: all)")
    rate_limit: Spacing = Field(default="1m",  # type: ignore[valid-type]
                                description="Minimum spacing of messages with the same event and key")
    source_unreachable_after: Spacing = Field(default="15m",  # type: ignore[valid-type]
                                              description="Git fetch failing this long: a message")

    _events = field_validator("events")(lambda cls, v: _events(v))


class PeerConfig(Strict):
    """The other daemon of a pair, for merged history and status (its metrics_listen, reachable from here)."""

    name: str = Field(description="The peer's ha.name")
    url: str = Field(description="Base URL of the peer's status server, e.g. http://login2:9464")

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.match(r"^https?://[^/@\s]+(/.*)?$", value):
            raise ValueError(f"url must be http(s)://host:port without credentials, got {value!r}")
        return value.rstrip("/")


class HAConfig(Strict):
    """Two login nodes, one acting daemon: a lease on the Slurm controller (docs/two-login-nodes.md)."""

    name: str | None = Field(default=None, description="This daemon's name in the pair (default: the short host "
                             "name); it must differ from the peer's")
    lease_node: str | None = Field(default=None, description="Node of the desired state that keeps the lease "
                                   "(default: the first Slurm controller)")
    lease_dir: str = Field(default="/var/lib/reconciler/ha", description="Directory on lease_node: lease.json, "
                           "leases.log, journal.json")
    fence_dir: str = Field(default="/var/lib/reconciler", description="Directory on every node where the highest "
                           "epoch seen is kept (fence.json) and fenced writes are journaled (writes.log)")
    lease_duration: LeaseDuration = Field(  # type: ignore[valid-type]
        default="15s", description="A leader that has not renewed for this long is replaced")
    renew_interval: RenewInterval = Field(  # type: ignore[valid-type]
        default="5s", description="How often the leader renews and the standby asks")
    peers: list[PeerConfig] = Field(default_factory=list, description="The other daemon(s): history and status "
                                    "pages show their runs too")

    @field_validator("lease_dir", "fence_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path on the nodes")
        return value

    def seconds(self, name: str) -> int:
        """A duration field in seconds."""
        return parse_duration(getattr(self, name))

    @model_validator(mode="after")
    def _renew_in_time(self) -> HAConfig:
        duration, renew = self.seconds("lease_duration"), self.seconds("renew_interval")
        if renew <= 0 or 2 * renew > duration:
            raise ValueError(f"renew_interval ({self.renew_interval}) must be at most half of lease_duration "
                             f"({self.lease_duration}): a leader must get two tries before its lease runs out")
        return self


class DaemonConfig(Strict):
    """Everything `reconciler run` needs."""

    repository: RepositoryConfig | None = None
    watch: str | None = Field(default=None, description="Local mode: a directory to watch instead of a repository")
    mode: Literal["enforce", "report"] = "report"
    poll_interval: Interval = "1m"  # type: ignore[valid-type]
    drift_interval: Interval = "5m"  # type: ignore[valid-type]
    debounce: float = Field(default=1.0, ge=0, le=3600, description="Local mode: seconds of quiet before reconciling")
    state_dir: str = "/var/lib/reconciler"
    metrics_listen: str | None = Field(default="127.0.0.1:9464", description="host:port of /metrics and the status "
                                       "page, or null for none (localhost by default)")
    status_page: bool = Field(default=True, description="Serve the read-only status page at / on metrics_listen")
    log_format: Literal["auto", "json", "console"] = "auto"
    ssh: SSHOverrides = Field(default_factory=SSHOverrides)
    signing: SigningPolicy | None = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    forge: ForgeConfig | None = None
    checks_after_apply: bool = True
    max_unavailable: int = Field(default=1, ge=1, le=100000)
    max_fail_percent: float = Field(default=50.0, ge=0, le=100)
    drain_timeout: DrainTimeout = "1h"  # type: ignore[valid-type]
    ssh_idle_timeout: IdleTimeout = Field(  # type: ignore[valid-type]
        default="10m", description="Persistent SSH sessions: a node connection unused this long is closed "
        "(0: a fresh connection per cycle, no persistence)")
    notifications: NotificationsConfig | None = None
    age_identity: str | None = Field(default=None, description="age identity file (relative: to this file's "
                                     "directory) that decrypts the desired state's .age files on this node")
    ha: HAConfig | None = Field(default=None, description="Run as one of two daemons on two login nodes (leader "
                                "election with fencing); absent: a single daemon")
    cluster: str | None = Field(default=None, description="The cluster of a multi-cluster repository this daemon "
                                "reconciles (clusters/<name>/); required there, absent for a single-cluster one")
    promotion_sources: dict[str, str] = Field(default_factory=dict, description="Cluster name -> base URL of its "
                                              "daemon's listener (metrics_listen), asked for /promotion.json when "
                                              "promotion.yaml puts this cluster after it")


    @model_validator(mode="after")
    def _one_source(self) -> DaemonConfig:
        if (self.repository is None) == (self.watch is None):
            raise ValueError("give exactly one of repository (Git mode) or watch (local mode)")
        if self.signing and self.watch:
            raise ValueError("signing needs a repository, not a watched directory")
        return self

    @field_validator("promotion_sources")
    @classmethod
    def _sources(cls, value: dict[str, str]) -> dict[str, str]:
        for name, url in value.items():
            if not re.match(r"^https?://[^/@\s]+(/.*)?$", url):
                raise ValueError(f"{name}: must be http(s)://host:port without credentials, got {url!r}")
        return {name: url.rstrip("/") for name, url in value.items()}

    @field_validator("metrics_listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"metrics_listen must be host:port, got {value!r}")
        return value

    def seconds(self, name: str) -> int:
        """A duration field in seconds."""
        return parse_duration(getattr(self, name))

    @property
    def state_path(self) -> Path:
        """The state directory as a Path."""
        return Path(self.state_dir)


def load_config(path: str | Path) -> DaemonConfig:
    """Load and validate a daemon config file; raise DesiredStateError with file:line on errors."""
    return load_yaml_model(path, DaemonConfig)
