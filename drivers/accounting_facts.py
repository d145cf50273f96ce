"""Slurm accounting as it is: one command on the controller (`sacctmgr -P -n show ...` with explicit
`format=`, and the jobs by user and account), parsed into plain values, and the normalisations that make
desired and actual comparable (TRES lists, time limits, names).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from reconciler.facts.sections import script, split_sections

QOS_FORMAT = ("Name,Description,Priority,Preempt,PreemptMode,Flags,UsageFactor,GrpTRES,GrpJobs,MaxTRES,"
              "MaxTRESPerNode,MaxTRESPU,MaxJobsPU,MaxSubmitPU,MaxWall")
ACCOUNT_FORMAT = "Account,Description,Organization"
ASSOC_FORMAT = ("Account,User,Partition,ParentName,Share,QOS,DefaultQOS,GrpTRES,GrpJobs,GrpSubmit,GrpWall,MaxJobs,"
                "MaxSubmit,MaxWall,MaxTRES,MaxTRESPerNode")
USER_FORMAT = "User,DefaultAccount,AdminLevel"
JOBS = "squeue -h -t PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING -o '%i|%u|%a|%T'"

# desired field name -> column of `show qos` / `show assoc`
QOS_LIMIT_COLUMNS = {"GrpTRES": "GrpTRES", "GrpJobs": "GrpJobs", "MaxTRESPerJob": "MaxTRES",
                     "MaxTRESPerNode": "MaxTRESPerNode", "MaxTRESPerUser": "MaxTRESPU",
                     "MaxJobsPerUser": "MaxJobsPU", "MaxSubmitJobsPerUser": "MaxSubmitPU", "MaxWall": "MaxWall"}
ASSOC_LIMIT_COLUMNS = {"GrpTRES": "GrpTRES", "GrpJobs": "GrpJobs", "GrpSubmitJobs": "GrpSubmit", "GrpWall": "GrpWall",
                       "MaxJobs": "MaxJobs", "MaxSubmitJobs": "MaxSubmit", "MaxWall": "MaxWall",
                       "MaxTRESPerJob": "MaxTRES", "MaxTRESPerNode": "MaxTRESPerNode"}


def accounting_command(cluster: str) -> str:
    """The controller's one command: QOS, accounts, associations of CLUSTER, users, and the jobs."""
    show = "sacctmgr -P -n show"
    quoted = shlex.quote(f"cluster={cluster}")
    return script([
        ("qos", f"{show} qos format={QOS_FORMAT}"),
        ("accounts", f"{show} account format={ACCOUNT_FORMAT}"),
        # WOPLimits: the values stored on each association, not those it inherits from its parents
        ("assoc", f"{show} assoc {quoted} WOPLimits format={ASSOC_FORMAT}"),
        ("users", f"{show} user format={USER_FORMAT}"),
        ("jobs", JOBS),
    ])


@dataclass
class Qos:
    """A QOS as sacctmgr shows it (limits by the desired state's names)."""

    name: str
    description: str = ""
    priority: int = 0
    preempt: list[str] = field(default_factory=list)
    preempt_mode: str = ""
    flags: list[str] = field(default_factory=list)
    usage_factor: float = 1.0
    limits: dict[str, str] = field(default_factory=dict)


@dataclass
class Assoc:
    """An association of the cluster: an account's (user '') or a user's in an account."""

    account: str
    user: str
    parent: str
    share: str
    qos: list[str]
    default_qos: str
    limits: dict[str, str]


@dataclass
class Job:
    """A pending or running job: id, user, account, state."""

    id: str
    user: str
    account: str
    state: str


@dataclass
class AccountingFacts:
    """The accounting database of one cluster, as read from the controller."""

    qos: dict[str, Qos] = field(default_factory=dict)
    accounts: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (description, organization)
    assocs: list[Assoc] = field(default_factory=list)
    users: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (default account, admin level)
    jobs: list[Job] = field(default_factory=list)
    error: str | None = None

    def account_assoc(self, name: str) -> Assoc | None:
        """The account's own association (user '')."""
        return next((a for a in self.assocs if a.account == name and not a.user), None)

    def user_assocs(self, user: str) -> dict[str, Assoc]:
        """The user's associations by account (partition-less ones)."""
        return {a.account: a for a in self.assocs if a.user == user}

    def to_json(self) -> dict[str, Any]:
        """Plain values (ClusterFacts.kept's JSON form)."""
        return asdict(self)


def _rows(text: str, width: int) -> list[list[str]]:
    """`-P` rows of WIDTH fields ('|' separated); other lines are left out."""
    rows = []
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) == width:
            rows.append(cells)
    return rows


def _list(text: str) -> list[str]:
    """A comma list, empty items dropped, sorted."""
    return sorted(item.strip() for item in text.split(",") if item.strip())


def parse_accounting(output: str) -> AccountingFacts:
    """The controller's answer, section by section; a failing sacctmgr sets `error`."""
    sections = split_sections(output)
    facts = AccountingFacts()
    for name in ("qos", "accounts", "assoc", "users"):
        sec = sections.get(name)
        if sec is None or sec.rc != 0:
            why = (sec.lines[-1] if sec and sec.lines else "no answer") if sec else "no answer"
            facts.error = f"sacctmgr show {name} failed: {why}"
            return facts
    qos_columns = QOS_FORMAT.split(",")
    for cells in _rows(sections["qos"].output, len(qos_columns)):
        row = dict(zip(qos_columns, cells, strict=True))
        facts.qos[row["Name"]] = Qos(
            name=row["Name"], description=row["Description"], priority=int(row["Priority"] or 0),
            preempt=_list(row["Preempt"]), preempt_mode=row["PreemptMode"].lower(), flags=_list(row["Flags"]),
            usage_factor=float(row["UsageFactor"] or 1),
            limits={want: row[column] for want, column in QOS_LIMIT_COLUMNS.items()})
    for cells in _rows(sections["accounts"].output, 3):
        facts.accounts[cells[0]] = (cells[1], cells[2])
    assoc_columns = ASSOC_FORMAT.split(",")
    for cells in _rows(sections["assoc"].output, len(assoc_columns)):
        row = dict(zip(assoc_columns, cells, strict=True))
        if row["Partition"]:
            continue  # partition associations are not managed
        facts.assocs.append(Assoc(account=row["Account"], user=row["User"], parent=row["ParentName"],
                                  share=row["Share"], qos=_list(row["QOS"]), default_qos=row["DefaultQOS"],
                                  limits={want: row[column] for want, column in ASSOC_LIMIT_COLUMNS.items()}))
    for cells in _rows(sections["users"].output, 3):
        facts.users[cells[0]] = (cells[1], cells[2])
    jobs = sections.get("jobs")
    for cells in _rows(jobs.output if jobs else "", 4):
        facts.jobs.append(Job(*cells))
    return facts


# ---------------------------------------------------------------- normalising values for comparison

_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
_WALL = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def tres(text: str | None) -> dict[str, str]:
    """`gres/gpu=8,cpu=64` -> {'cpu': '64', 'gres/gpu': '8'}; memory in MiB; -1 items (cleared) left out."""
    found: dict[str, str] = {}
    for item in (text or "").split(","):
        if "=" not in item:
            continue
        name, value = item.strip().split("=", 1)
        if value in ("-1", ""):
            continue
        if value[-1:] in _UNITS and value[:-1].isdigit():
            megabytes = int(value[:-1]) * _UNITS[value[-1]]
            value = str(int(megabytes)) if name == "mem" else value
        found[name] = value
    return dict(sorted(found.items()))


def minutes(text: str | int | None) -> int | None:
    """A Slurm time limit in minutes; None for unset, -1 and UNLIMITED.

    MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (what sacctmgr prints and takes)."""
    value = str(text if text is not None else "").strip()
    if value in ("", "-1", "UNLIMITED", "INFINITE"):
        return None
    found = _WALL.match(value)
    if found is None:
        return None
    days = int(found.group("d") or 0)
    a, b, c = found.group("a"), found.group("b"), found.group("c")
    if found.group("d") is not None:  # D-HH[:MM[:SS]]
        hours, mins, secs = int(a), int(b or 0), int(c or 0)
    elif c is not None:  # HH:MM:SS
        hours, mins, secs = int(a), int(b or 0), int(c)
    else:  # MM[:SS]
        hours, mins, secs = 0, int(a), int(b or 0)
    return days * 1440 + hours * 60 + mins + (1 if secs else 0)


def number(text: str | int | None) -> int | None:
    """A count limit; None for unset and -1."""
    value = str(text if text is not None else "").strip()
    return None if value in ("", "-1") else int(value)
