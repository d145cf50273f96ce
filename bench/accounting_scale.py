"""Accounting at scale (issue 32): validate and plan a desired state of 20,000 users and 2,000 accounts.

Run: `python -m bench.accounting_scale [--users 20000] [--accounts 2000] [--runs 3]`.
The users are split over files of USERS_PER_FILE (one file of them all, ~1 MB, is over the loader's 512 KB
limit). Plan is the accounting driver's Planner against synthesised databases, not a real slurmdbd: a fresh one
(root only: everything created), the converged one (sacctmgr's `-P` output, parsed as the driver parses the
controller's answer: nothing to do), and the converged one with 1% of the users changed by hand.
Pure CPU; no SSH, no Slurm.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.render_scale import write_desired_state
from reconciler.desired.loader import load_dir
from reconciler.drivers.accounting import Planner
from reconciler.drivers.accounting_facts import ACCOUNT_FORMAT, ASSOC_FORMAT, QOS_FORMAT, parse_accounting
from reconciler.facts.sections import MARK
from reconciler.model import Accounting

USERS_PER_FILE = 5_000
DEPARTMENTS = 20
QOS = [("high", 100, {"MaxTRESPerUser": "gres/gpu=8"}), ("low", 10, {}), ("long", 50, {"MaxWall": "7-00:00:00"}),
       ("debug", 200, {"MaxWall": "00:30:00"}), ("large", 80, {"GrpTRES": "gres/gpu=256"})]
QOS_COLUMNS = {"MaxTRESPerUser": "MaxTRESPU", "MaxWall": "MaxWall", "GrpTRES": "GrpTRES"}


def _groups(accounts: int) -> list[tuple[str, str]]:
    """(group account, its department) for the accounts below the departments."""
    per = max(1, (accounts - DEPARTMENTS) // DEPARTMENTS)
    return [(f"dept{d:02d}-g{g:03d}", f"dept{d:02d}") for d in range(DEPARTMENTS) for g in range(per)]


def _user(index: int, groups: list[tuple[str, str]]) -> tuple[str, str, str | None, bool]:
    """User INDEX: name, default account, a second account (every 4th), a MaxSubmitJobs limit (every 10th)."""
    default = groups[index % len(groups)][0]
    second = groups[(index * 7 + 1) % len(groups)][0] if index % 4 == 0 else None
    return f"u{index:05d}", default, second if second != default else None, index % 10 == 0


def write_accounting(root: Path, users: int, accounts: int) -> list[Path]:
    """Write a small cluster and its accounting, the users split over files; return the accounting files."""
    write_desired_state(root, 4)
    groups = _groups(accounts)
    folder = root / "accounting"
    folder.mkdir()
    lines = ["accounting:", "  qos:"]
    lines += [f"    - {{name: {name}, priority: {prio}" + (", limits: {" + ", ".join(
        f'{k}: "{v}"' for k, v in limits.items()) + "}" if limits else "") + "}" for name, prio, limits in QOS]
    lines.append("  accounts:")
    lines += [f"    - {{name: dept{d:02d}, description: department {d:02d}, organization: uni, fairshare: 10, "
              "qos: [normal, high, low]}" for d in range(DEPARTMENTS)]
    lines += [f"    - {{name: {name}, parent: {dept}, fairshare: {1 + i % 5}"
              + (', limits: {GrpTRES: "gres/gpu=16"}' if i % 3 == 0 else "") + "}"
              for i, (name, dept) in enumerate(groups)]
    written = [folder / "tree.yaml"]
    written[0].write_text("\n".join(lines) + "\n")
    for first in range(0, users, USERS_PER_FILE):
        body = ["accounting:", "  users:"]
        for index in range(first, min(users, first + USERS_PER_FILE)):
            name, default, second, limited = _user(index, groups)
            body.append(f"    - {{name: {name}, default_account: {default}" + (f", accounts: [{second}]" if second
                        else "") + (", limits: {MaxSubmitJobs: 20}" if limited else "") + "}")
        path = folder / f"users-{first // USERS_PER_FILE:02d}.yaml"
        path.write_text("\n".join(body) + "\n")
        written.append(path)
    return written


def _row(columns: str, values: dict[str, str]) -> str:
    return "|".join(values.get(c, "") for c in columns.split(","))


def converged_output(users: int, accounts: int, drifted: int = 0) -> str:
    """What `accounting_command` prints on a controller whose database holds this state (DRIFTED users changed)."""
    groups = _groups(accounts)
    qos = [_row(QOS_FORMAT, {"Name": "normal", "Description": "Normal QOS default", "Priority": "0"})]
    qos += [_row(QOS_FORMAT, {"Name": name, "Description": name, "Priority": str(prio),
                              **{QOS_COLUMNS[k]: v for k, v in limits.items()}}) for name, prio, limits in QOS]
    acct = [_row(ACCOUNT_FORMAT, {"Account": "root", "Description": "default root account", "Organization": "root"})]
    acct += [_row(ACCOUNT_FORMAT, {"Account": f"dept{d:02d}", "Description": f"department {d:02d}",
                                   "Organization": "uni"}) for d in range(DEPARTMENTS)]
    acct += [_row(ACCOUNT_FORMAT, {"Account": name, "Description": name, "Organization": "uni"}) for name, _ in groups]
    assoc = [_row(ASSOC_FORMAT, {"Account": "root", "Share": "1", "QOS": "normal"}),
             _row(ASSOC_FORMAT, {"Account": "root", "User": "root", "Share": "1", "QOS": "normal"})]
    assoc += [_row(ASSOC_FORMAT, {"Account": f"dept{d:02d}", "ParentName": "root", "Share": "10",
                                  "QOS": "high,low,normal"}) for d in range(DEPARTMENTS)]
    assoc += [_row(ASSOC_FORMAT, {"Account": name, "ParentName": dept, "Share": str(1 + i % 5), "QOS": "normal",
                                  "GrpTRES": "gres/gpu=16" if i % 3 == 0 else ""})
              for i, (name, dept) in enumerate(groups)]
    people = ["root|root|Administrator"]
    for index in range(users):
        name, default, second, limited = _user(index, groups)
        submit = "20" if limited else ""
        if limited and index // 10 < drifted:  # changed by hand: the limit raised
            submit = "99"
        for account in [default, *([second] if second else [])]:
            assoc.append(_row(ASSOC_FORMAT, {"Account": account, "User": name, "Share": "1", "QOS": "normal",
                                             "MaxSubmit": submit}))
        people.append(f"{name}|{default}|None")
    return _sections([("qos", qos), ("accounts", acct), ("assoc", assoc), ("users", people), ("jobs", [])])


def _sections(parts: list[tuple[str, list[str]]]) -> str:
    """The controller's answer: each part between the section markers, exit status 0."""
    return "".join(f"{MARK}-begin {name}\n" + "".join(f"{line}\n" for line in rows) + f"{MARK}-end {name} 0\n"
                   for name, rows in parts)


def fresh_output() -> str:
    """What a new slurmdbd shows: the root account and user, the normal QOS."""
    return _sections([
        ("qos", [_row(QOS_FORMAT, {"Name": "normal", "Description": "Normal QOS default", "Priority": "0"})]),
        ("accounts", ["root|default root account|root"]),
        ("assoc", [_row(ASSOC_FORMAT, {"Account": "root", "Share": "1", "QOS": "normal"}),
                   _row(ASSOC_FORMAT, {"Account": "root", "User": "root", "Share": "1", "QOS": "normal"})]),
        ("users", ["root|root|Administrator"]), ("jobs", [])])


def _timed(runs: int, work: Callable[[], Any]) -> tuple[float, Any]:
    """Median seconds of RUNS calls of WORK, and what the last one returned."""
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def measure(users: int, accounts: int, runs: int) -> dict[str, Any]:
    """Validate and plan figures for one size."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_accounting(root, users, accounts)
        validate_s, loaded = _timed(runs, lambda: load_dir(root))
        sizes = [p.stat().st_size for p in files]
    desired: Accounting = loaded.state.accounting
    root_only = parse_accounting(fresh_output())
    text = converged_output(users, accounts)
    drifted_text = converged_output(users, accounts, drifted=users // 100)
    parse_s, converged = _timed(runs, lambda: parse_accounting(text))
    drifted = parse_accounting(drifted_text)
    create_s, created = _timed(runs, lambda: Planner(desired, root_only, "scale", "login01").plan())
    noop_s, nothing = _timed(runs, lambda: Planner(desired, converged, "scale", "login01").plan())
    drift_s, updates = _timed(runs, lambda: Planner(desired, drifted, "scale", "login01").plan())
    return {"users": len(desired.users), "accounts": len(desired.accounts), "qos": len(desired.qos),
            "files": len(files), "largest_file_kb": max(sizes) / 1000, "total_kb": sum(sizes) / 1000,
            "validate_s": validate_s, "parse_facts_s": parse_s, "facts_kb": len(text) / 1000,
            "plan_create_s": create_s, "plan_create_changes": len(created),
            "plan_noop_s": noop_s, "plan_noop_changes": len(nothing),
            "plan_drift_s": drift_s, "plan_drift_changes": len(updates)}


def table(rows: list[dict[str, Any]]) -> str:
    """The figures, one row per size."""
    head = (f"{'users':>7} {'accts':>6} {'files':>5} {'KB':>6} {'validate':>9} {'parse':>7} {'create':>8} "
            f"{'changes':>7} {'no-op':>7} {'changes':>7} {'1% drift':>8} {'changes':>7}")
    out = [head]
    for r in rows:
        out.append(f"{r['users']:>7} {r['accounts']:>6} {r['files']:>5} {r['total_kb']:>6.0f} "
                   f"{r['validate_s']:>8.2f}s {r['parse_facts_s']:>6.2f}s {r['plan_create_s']:>7.2f}s "
                   f"{r['plan_create_changes']:>7} {r['plan_noop_s']:>6.2f}s {r['plan_noop_changes']:>7} "
                   f"{r['plan_drift_s']:>7.2f}s {r['plan_drift_changes']:>7}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure the sizes asked for; print the table."""
    p = argparse.ArgumentParser(prog="python -m bench.accounting_scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", default="20000", help="comma-separated user counts (default 20000)")
    p.add_argument("--accounts", type=int, default=2000, help="accounts in the tree (default 2000)")
    p.add_argument("--runs", type=int, default=3, help="runs per figure, median reported (default 3)")
    args = p.parse_args(argv)
    rows = [measure(int(n), args.accounts, args.runs) for n in args.users.split(",") if n.strip()]
    print(table(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
