"""A simulated Slurm cluster behind the Transport interface, for the runner tests (no root, no testbed).

It answers the checks' commands as the real ones would in shape: the Slurm view, scontrol drains, resumes
and reservations (with Slurm's rule that no job starts on a drained node, nor on a reserved node from
outside the reservation), batches of srun lines (each replaying the recorded 8x H200 output, or the
degraded one for nodes in `degraded`), and the node-check probe script (munge/slurmd, /shared).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from reconciler.checks.slurm_view import VIEW_COMMAND
from reconciler.common import hostlist
from reconciler.desired.inventory import NodeSpec
from reconciler.transport.base import BaseTransport, CommandResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
HEALTHY = (FIXTURES / "h200x8_all_reduce_perf.txt").read_text()
DEGRADED = (FIXTURES / "handmade_h200x8_degraded_all_reduce.txt").read_text()
_LAUNCH = re.compile(r"; \( (timeout .*?) \) </dev/null")


class FakeCluster(BaseTransport):
    """Slurm state in dictionaries; every command is recorded as (node, command)."""

    def __init__(self, computes: list[str], controller: str = "ctl") -> None:
        super().__init__(8)
        self.controller = controller
        self.state = {n: "IDLE" for n in computes}
        self.reason: dict[str, str] = {}
        self.reservations: dict[str, set[str]] = {}
        self.degraded: set[str] = set()
        self.unmounted: set[str] = set()
        self.commands: list[tuple[str, str]] = []
        self.next_job = 100

    # ------------------------------------------------------------ helpers for tests

    def drained(self, node: str) -> bool:
        """Whether a node is drained."""
        return node in self.reason

    def sent(self, prefix: str) -> list[str]:
        """Commands sent that start with PREFIX."""
        return [c for _, c in self.commands if c.startswith(prefix)]

    # ------------------------------------------------------------ Transport

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        self.commands.append((node.name, command))
        if command == VIEW_COMMAND:
            return self._ok(node, self._view())
        if command.startswith("scontrol "):
            return self._scontrol(node, shlex.split(command))
        if "reconciler-nccl." in command:
            return self._ok(node, self._batch(command))
        if "@@reconciler-begin hostname" in command:
            return self._ok(node, self._probe(node.name, command))
        return CommandResult(node.name, 127, "", f"fake cluster: unknown command {command[:40]}", 0.01)

    def _ok(self, node: NodeSpec, out: str) -> CommandResult:
        return CommandResult(node.name, 0, out, "", 0.01)

    def _view(self) -> str:
        lines = []
        for name, state in self.state.items():
            flags = [state] + (["DRAIN"] if name in self.reason else []) + \
                (["MAINTENANCE", "RESERVED"] if any(name in r for r in self.reservations.values()) else [])
            reason = f" Reason={self.reason[name]} [root@2026-11-21T02:20:01]" if name in self.reason else ""
            lines.append(f"NodeName={name} Arch=x86_64 State={'+'.join(flags)} Partitions=debug{reason}")
        return (f"@@reconciler-begin nodes\n{chr(10).join(lines)}\n@@reconciler-end nodes 0\n"
                "@@reconciler-begin jobs\n@@reconciler-end jobs 0\n")

    def _scontrol(self, node: NodeSpec, argv: list[str]) -> CommandResult:
        args = dict(a.split("=", 1) for a in argv if "=" in a)
        if argv[1] == "update":
            name = args["nodename"]
            if args["state"] == "drain":
                self.reason[name] = args["reason"]
            elif args["state"] == "resume":
                self.reason.pop(name, None)
        elif argv[1] == "create":
            self.reservations[args["reservationname"]] = set(hostlist.expand(args["nodes"]))
        elif argv[1] == "delete":
            self.reservations.pop(args["reservationname"])
        return self._ok(node, "")

    def _srun(self, argv: list[str]) -> tuple[str, int]:
        opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        nodes = hostlist.expand(opts["nodelist"])
        held = self.reservations.get(opts.get("reservation", ""), set())
        for name in nodes:
            reserved_elsewhere = any(name in r for r in self.reservations.values()) and name not in held
            if name in self.reason or reserved_elsewhere:
                return ("srun: Required node not available (down, drained or reserved)\n"
                        "srun: error: Unable to allocate resources: Requested nodes are busy\n", 1)
        self.next_job += 1
        replay = DEGRADED if set(nodes) & self.degraded else HEALTHY
        return f"# reconciler: job {self.next_job} step 0 rank 0 on {nodes[0]}\n{replay}", 0

    def _batch(self, script: str) -> str:
        out = []
        for i, line in enumerate(_LAUNCH.findall(script)):
            text, rc = self._srun(shlex.split(line))
            out.append(f"@@reconciler-begin time.{i}\n{rc} 1000.0 1002.5\n@@reconciler-end time.{i} 0\n"
                       f"@@reconciler-begin step.{i}\n{text}@@reconciler-end step.{i} {rc}\n")
        return "".join(out)

    def _probe(self, name: str, command: str) -> str:
        parts = [f"@@reconciler-begin hostname\n{name}\n@@reconciler-end hostname 0\n"]
        if "mountinfo" in command:
            mount = "" if name in self.unmounted else "600 500 0:77 /srv/shared /shared rw - overlay ctl:/ rw\n"
            parts.append(f"@@reconciler-begin mountinfo\n{mount}@@reconciler-end mountinfo 0\n"
                         "@@reconciler-begin write.0\n@@reconciler-end write.0 0\n")
        if "supervisorctl status" in command:
            parts.append("@@reconciler-begin services\nmunge RUNNING pid 3, uptime 0:01:00\n"
                         "slurmd RUNNING pid 4, uptime 0:01:00\n@@reconciler-end services 0\n")
        return "".join(parts)
