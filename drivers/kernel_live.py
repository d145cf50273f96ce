"""Live kernel values for the kernel drivers: /sys/module and /proc/sys files, read inside the fact script.

Each driver asks for its paths under its own snippet name; the answer (path -> text, None when the path does not
exist, or {"error": ...}) is kept per node as the driver's own LiveValues type (LiveSysctls, LiveModules). A
directory reads as "" (present).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from reconciler.engine.context import Context
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts

MAX_VALUE = 4096  # what is read of one value (a sysctl or module parameter is short)
MAX_PATHS = 10_000
MAX_FILE = 65536  # what is read of a listed file (our modprobe.d files are a few lines)


@dataclass(frozen=True)
class LiveValues:
    """One node's answer to a kernel snippet: path -> text, None when absent, {"error": ...}; None: unreadable."""

    values: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        """Plain values (ClusterFacts.kept's JSON form)."""
        return {"values": self.values}


class LiveSysctls(LiveValues):
    """The /proc/sys values the sysctls driver read."""


class LiveModules(LiveValues):
    """The /sys/module values (and our modprobe.d files) the kernel-modules driver read."""


def snippet(paths: list[str], listing: tuple[str, str, str] | None = None) -> str:
    """The fact script's snippet (stdlib, Python 3.8, no import): each path's text, None when absent, "" for a
    directory; with LISTING (directory, prefix, suffix), also the text of each file of that directory named
    PREFIX*SUFFIX, under the key "listing". The answer is a Python literal (repr): no json module to import."""
    lines = ["found = {}", f"for p in {sorted(set(paths))!r}:",
             "    try:",
             f"        with open(p) as fh: found[p] = fh.read({MAX_VALUE})",
             "    except IsADirectoryError: found[p] = ''",
             "    except FileNotFoundError: found[p] = None",
             "    except OSError as exc: found[p] = {'error': exc.strerror or str(exc)}"]
    if listing is not None:
        directory, prefix, suffix = listing
        lines += ["listed = {}", f"try: names = sorted(os.listdir({directory!r}))",
                  "except OSError: names = []",
                  f"for n in names[:{MAX_PATHS}]:",
                  f"    if n.startswith({prefix!r}) and n.endswith({suffix!r}):",
                  "        try:",
                  f"            with open({directory!r} + '/' + n) as fh: listed[{directory!r} + '/' + n] = "
                  f"fh.read({MAX_FILE})",
                  "        except OSError: pass",
                  "found['listing'] = listed"]
    return "import os\n" + "\n".join(lines) + "\nstdout = repr(found)\n"


def ask(req: FactRequest, name: str, paths: list[str]) -> None:
    """Add the snippet reading PATHS to the node's request, under NAME (nothing when there are no paths)."""
    if paths:
        req.python[name] = snippet(paths)


def parse(answer: Any) -> dict[str, Any] | None:
    """The snippet's answer, or None when it did not run or is unreadable. A node answers what it likes: only
    values that are strings, None or an error text are kept (and the listing's path -> text)."""
    if not isinstance(answer, dict) or answer.get("rc") != 0 or not isinstance(answer.get("stdout"), str):
        return None
    text = answer["stdout"]
    if len(text) > (MAX_PATHS + 16) * (MAX_VALUE + 256):
        return None
    try:
        data = ast.literal_eval(text)  # literals only: nothing a node says is run
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    out: dict[str, Any] = {}
    for path, value in list(data.items())[:MAX_PATHS + 1]:
        if not isinstance(path, str):
            continue
        if path == "listing":
            if isinstance(value, dict):
                out[path] = {k: v[:MAX_FILE] for k, v in list(value.items())[:MAX_PATHS]
                             if isinstance(k, str) and isinstance(v, str)}
        elif value is None or isinstance(value, str):
            out[path] = value if value is None else value[:MAX_VALUE]
        elif isinstance(value, dict) and isinstance(value.get("error"), str):
            out[path] = {"error": value["error"][:200]}
    return out


def absorb(name: str, kind: type[LiveValues], cluster: ClusterFacts, node: str, facts: NodeFacts,
           commands: dict[str, dict]) -> None:
    """Keep NODE's answer to snippet NAME as a KIND (nothing when it was not asked)."""
    if facts.reachable and name in commands:
        cluster.keep(node, kind(parse(commands[name])))


def live(ctx: Context, kind: type[LiveValues], node: str) -> dict[str, Any] | None:
    """NODE's live values of KIND; None when they were not gathered or were unreadable."""
    found = ctx.facts.kept_of(kind, node)
    return found.values if found is not None else None


def normalised(text: str) -> str:
    """A value as sysctl prints it: whitespace-separated fields joined by one space (tabs in /proc/sys)."""
    return " ".join(text.split())
