"""structlog set-up: JSON lines (journald-friendly) by default, a readable console renderer on a TTY."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

SECRET_KEYS = re.compile(r"token|password|passwd|secret|private_key|authorization", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.IGNORECASE)
_INLINE_SECRETS = re.compile(r"(?P<key>(?:token|password|secret)[=:]\s*)\S+|"
                             r"(?P<hdr>(?:Bearer|token)\s+)[A-Za-z0-9_\-.]{8,}|"
                             r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
                             re.IGNORECASE)


def redact_url_credentials(text: str) -> str:
    """Remove credentials embedded in URLs (https://user:token@host -> https://***@host)."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}***@", text)


def scrub(text: str) -> str:
    """Remove secrets from free text: URL credentials, `token=...`, bearer tokens, private keys."""
    text = redact_url_credentials(text)

    def inline(match: re.Match[str]) -> str:
        if match.group("key"):
            return f"{match.group('key')}***"
        if match.group("hdr"):
            return f"{match.group('hdr')}***"
        return "***PRIVATE KEY***"

    return _INLINE_SECRETS.sub(inline, text)


def redact_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: blank secret-looking keys and scrub every string value."""
    for key, value in list(event.items()):
        if SECRET_KEYS.search(key):
            event[key] = "***"
        elif isinstance(value, str):
            event[key] = scrub(value)
    return event


def configure(fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog for the daemon: json, console, or auto (console on a TTY)."""
    stream = stream or sys.stderr
    use_console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer: Any = structlog.dev.ConsoleRenderer(colors=stream.isatty()) if use_console else \
        structlog.processors.JSONRenderer(sort_keys=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )


def get_logger(**context: Any) -> Any:
    """A bound structlog logger."""
    return structlog.get_logger("reconciler").bind(**context)
