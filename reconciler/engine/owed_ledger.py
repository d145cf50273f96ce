"""An apply's bookkeeping of owed follow-ups: the marker files (reconciler/engine/owed.py) written on the keeping
nodes before any file is written, and rewritten once the steps have run: what did not finish stays, with its
error; a marker with nothing left is removed. Writing first means an apply killed between its file writes and its
restarts (the CLI's SSH session cut, the process killed) leaves the steps owed too, as the daemon's journal does.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from collections.abc import Callable

from reconciler.desired.inventory import NodeSpec
from reconciler.engine.context import Context
from reconciler.engine.followups import FollowUp
from reconciler.engine.owed import OWED_PATH, OwedFile, OwedStep, covered, keeper, read_owed
from reconciler.facts.fence_script import FENCE_CHECK_SOURCE
from reconciler.facts.models import FileFact
from reconciler.transport.base import Transport

# Runs on the node; stdin: {"path", "owed": [...] or null (remove), "fence": {...} or null}; stdout: {"ok": ...}.
_SCRIPT = FENCE_CHECK_SOURCE + r'''
import json, os, sys
request = json.load(sys.stdin)
if request.get("fence"):
    held, refusal = fence_check(request["fence"])
    if refusal:
        json.dump({"ok": False, "error": refusal}, sys.stdout); held.close(); sys.exit(0)
path = request["path"]; folder = os.path.dirname(path)
os.makedirs(folder, mode=0o700, exist_ok=True)
if request["owed"] is None:
    if os.path.exists(path): os.unlink(path)
else:
    fresh = path + ".new"
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"owed": request["owed"]}, fh, indent=1); fh.flush(); os.fsync(fh.fileno())
    os.rename(fresh, path)
fd = os.open(folder, os.O_RDONLY)
try: os.fsync(fd)
finally: os.close(fd)
json.dump({"ok": True}, sys.stdout)
if request.get("fence"): held.close()  # the fence lock, held through the write (closed: no ResourceWarning at exit)
'''
OWED_COMMAND = "python3 -c " + "'" + _SCRIPT.replace("'", "'\"'\"'") + "'"


def _whoami() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname().split('.')[0]}"


class OwedLedger:
    """The owed steps of one apply, by keeping node: recorded before the apply, settled after it."""

    def __init__(self, ctx: Context, transport: Transport, steps: list[FollowUp],
                 fence: dict[str, object] | None, log: Callable[[str], None]) -> None:
        self.ctx, self.transport, self.fence, self.log = ctx, transport, fence, log
        before, _ = read_owed(ctx)  # an unreadable or refused marker is a plan error: left alone here
        now, me = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), _whoami()
        # what this apply does not take on stays as it was; what it does (or supersedes) is its own now
        self.others = {node: [i for i in items if not covered(i.step, steps)] for node, items in before.items()}
        self.planned: dict[str, list[OwedStep]] = {}
        for step in steps:
            home = keeper(ctx, step)
            old = next((i for i in before.get(home, []) if i.step.key == step.key), None)
            self.planned.setdefault(home, []).append(
                OwedStep(step=_plain(step), since=old.since if old else now, by=old.by if old else me))
        self.nodes = set(self.planned) | {n for n, items in before.items() if len(self.others[n]) != len(items)}

    def record(self) -> None:
        """Before the apply: every step it will try, on its keeping node (a failed write is said, not fatal)."""
        self._send({node: self.others.get(node, []) + items for node, items in self.planned.items()}, "record")

    def settle(self, done: set[str], failures: dict[str, list[str]], stopped: str | None) -> list[str]:
        """After the apply: what did not finish stays owed, with why; the rest is struck off. Lines to report."""
        markers: dict[str, list[OwedStep]] = {}
        lines: dict[str, list[str]] = {}
        for node in sorted(self.nodes):
            markers[node] = list(self.others.get(node, []))
            for item in self.planned.get(node, []):
                if item.step.key in done:
                    continue
                why = "; ".join(failures.get(item.step.node, [])) or (f"not run: {stopped}" if stopped else "not run")
                item.error = " ".join(why.split())[:300]
                markers[node].append(item)
                lines.setdefault(node, []).append(f"{item.step.node}: {item.step.title()} is owed: the next plan "
                                                  f"shows it and the next apply runs it (kept in {node}:{OWED_PATH})")
        sent = self._send(markers, "settle")
        return [line for node in sorted(lines) if node in sent for line in lines[node]]

    def _send(self, markers: dict[str, list[OwedStep]], what: str) -> set[str]:
        """Write (or, when empty, remove) each node's marker; the nodes where that worked."""
        specs = [self.ctx.specs[n] for n in markers if n in self.ctx.specs]
        if not specs:
            return set()

        def stdin(spec: NodeSpec) -> str:
            items = markers[spec.name]
            owed = [i.model_dump(mode="json") for i in items] if items else None
            return json.dumps({"path": OWED_PATH, "owed": owed, "fence": self.fence})

        results = self.transport.run_many(specs, OWED_COMMAND, stdin=stdin)
        written = set()
        for node, result in results.items():
            answer = _answer(result.stdout) if result.ok else None
            if answer is not None and answer.get("ok"):
                written.add(node)
                self._remember(node, markers[node])
            else:
                detail = (answer or {}).get("error") or result.error or (result.stderr or result.stdout).strip()[-200:]
                self.log(f"{node}: could not {what} the owed follow-ups in {OWED_PATH}: {detail}")
        return written

    def _remember(self, node: str, items: list[OwedStep]) -> None:
        """The facts follow the marker: a later apply of this run (the next wave) starts from what is there."""
        facts = self.ctx.facts.nodes.get(node)
        if facts is not None:
            facts.files[OWED_PATH] = (FileFact(exists=True, content=OwedFile(owed=items).model_dump_json())
                                      if items else FileFact(exists=False))


def _plain(step: FollowUp) -> FollowUp:
    """The step as it is kept: without the jobs seen at planning time and the reason it was owed before."""
    copy = step.model_copy(deep=True)
    copy.jobs = []
    copy.reasons = [r for r in copy.reasons if not r.startswith("owed since ")]
    return copy


def _answer(stdout: str) -> dict | None:
    try:
        answer = json.loads(stdout)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None
