"""The upgrade's gates that run a program on the node: LBNL NHC (`nhc`) and a site's own command. Each is a shell
command for the node and a judge of what it printed; checks/upgrade_gates.py runs them in the order of
`rollout.upgrade.gates`, on the drained node, before it is resumed.

NHC (https://github.com/mej/nhc, the `nhc` driver script; read at its current master): exit 0 when every check
passed; on a failure `die` logs `ERROR:  nhc:  Health check failed:  <message>` and exits non-zero
(`nhcmain_run_checks`, `die`). Run by hand on a node where it finds Slurm, NHC marks the node offline itself on a
failure and back online on a pass (`MARK_OFFLINE`, default 1; `node-mark-online` resumes a node whose reason
starts with `NHC:`). The upgrade holds the node with its own drain and resumes it itself, so the gate runs NHC with
`MARK_OFFLINE=0` (NHC takes `VAR=value` arguments: `nhcmain_parse_cmdline`), and with `DETACHED_MODE=0`, since
detached mode answers with the previous run's result, not this boot's. `-l -` logs to the output the gate reads;
`-t` is NHC's own watchdog. A node without `nhc` passes the gate, saying so in the log: NHC is a site's choice
per node, and the issue asks for it "when installed".
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from reconciler.model.upgrade import CommandGate

NHC_ABSENT = "reconciler: nhc is not installed on this node"
OUTPUT_CHARS = 150  # of a failing gate's output kept in the node's drain reason (Slurm's reason is one line)


@dataclass(frozen=True)
class Verdict:
    """A node gate's answer: why it failed (None: passed) and a note for the log (e.g. not installed)."""

    why: str | None
    note: str | None = None


def nhc_command(timeout: int) -> str:
    """Run NHC on the node (this run's result, NHC leaving the node's Slurm state alone), or say it is absent."""
    return ('PATH="$PATH:/usr/sbin:/sbin"; if ! command -v nhc >/dev/null 2>&1; then '
            f"echo {shlex.quote(NHC_ABSENT)}; exit 0; fi; "
            f"nhc -l - -t {int(timeout)} MARK_OFFLINE=0 DETACHED_MODE=0 2>&1")


def judge_nhc(rc: int | None, output: str) -> Verdict:
    """NHC's exit status and output as a gate verdict: its `Health check failed:` message when it failed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if rc == 0:
        return Verdict(None, "nhc is not installed: not run" if NHC_ABSENT in lines else None)
    failed = [line.split("Health check failed:", 1)[1].strip() for line in lines if "Health check failed:" in line]
    said = failed[-1] if failed else (lines[-1] if lines else "no output")
    status = "cut off (timed out or connection lost)" if rc is None else f"exit {rc}"
    return Verdict(f"nhc gate: {status}: {_short(said)}")


def command_line(gate: CommandGate, seconds: int) -> str:
    """The site's command under `timeout` (coreutils: exit 124 when it ran out), its output and errors together."""
    return f"timeout --kill-after=10 {int(seconds)} sh -c {shlex.quote(gate.command)} 2>&1"


def judge_command(gate: CommandGate, seconds: int, rc: int | None, output: str) -> Verdict:
    """Exit 0 passes; otherwise the gate's name, the exit status and the end of its output."""
    if rc == 0:
        return Verdict(None)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if rc == 124:
        status = f"timed out after {seconds}s"
    elif rc is None:
        status = "cut off (connection lost)"
    else:
        status = f"exit {rc}"
    return Verdict(f"command gate {gate.label}: {status}: {_short(' / '.join(lines)) if lines else 'no output'}")


def _short(text: str) -> str:
    """One line of at most OUTPUT_CHARS, the end kept (where a check says why it failed)."""
    text = " ".join(text.split())
    return text if len(text) <= OUTPUT_CHARS else "..." + text[-(OUTPUT_CHARS - 3):]
