"""Relations between values that each look fine alone: an account tree with a cycle, a QOS preempting itself,
a rollout gate with nothing to run. Each is a (key path, message) problem, reported at the key's file:line."""

from __future__ import annotations

from collections.abc import Iterator

from reconciler.model import Accounting, DesiredState

Problem = tuple[tuple[str | int, ...], str]


def account_cycles(acct: Accounting) -> Iterator[Problem]:
    """Every account whose parent chain comes back to itself (sacctmgr would loop or refuse mid-apply)."""
    parents = {a.name: a.parent for a in acct.accounts if a.state == "present"}
    index = {a.name: i for i, a in enumerate(acct.accounts) if a.state == "present"}
    reported: set[str] = set()
    for start in parents:
        chain: list[str] = []
        name = start
        while name in parents and name not in chain:
            chain.append(name)
            name = parents[name]
        if name not in chain or name in reported:
            continue
        loop = chain[chain.index(name):]
        reported.update(loop)
        first = min(loop, key=index.__getitem__)
        shown = " -> ".join([*loop[loop.index(first):], *loop[:loop.index(first)], first])
        yield (("accounting", "accounts", index[first], "parent"),
               f"the account tree has a cycle: {shown} (every account needs a path up to root)")


def qos_self_preemption(acct: Accounting) -> Iterator[Problem]:
    """A QOS that lists itself in preempt (Slurm refuses it: 'QOS can't preempt itself')."""
    for i, qos in enumerate(acct.qos):
        if qos.name in (qos.preempt or []):
            yield ("accounting", "qos", i, "preempt"), f"QOS {qos.name!r} cannot preempt itself"


def rollout_gates(state: DesiredState) -> Iterator[Problem]:
    """Gates that are switched on but could never run (a silent pass would look like a checked wave)."""
    gates = state.rollout.gates
    if gates.smoke_image and not gates.smoke_job:
        yield (("rollout", "gates", "smoke_image"),
               "smoke_image is started by the smoke job, and smoke_job is off: turn it on or drop smoke_image")
    if gates.nccl and not state.checks.nccl:
        yield (("rollout", "gates", "nccl"),
               "the nccl gate runs the checks of checks.nccl, and there are none: declare one or turn the gate off")


def relations(state: DesiredState) -> list[Problem]:
    """Every relation problem of the desired state."""
    problems = list(rollout_gates(state))
    if state.accounting is not None:
        problems += [*account_cycles(state.accounting), *qos_self_preemption(state.accounting)]
    return problems
