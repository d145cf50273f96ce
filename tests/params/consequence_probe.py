"""Measure on a running testbed what a Slurm configuration change needs before it takes effect, and judge the
project's claim for it.

The routes are the project's own (drivers/slurm_config.py's follow-ups): `reconfigure`; `restart_slurmctld`;
`restart_slurmd` (reconfigure, then every slurmd); `restart_all` (slurmctld, then every slurmd). Each case's
routes are tried cheapest first, the claimed one first among equals, and the search stops at the first route that
is SUFFICIENT (the change shows on the daemons: consequence_cases' checks; every daemon alive, none died and was
restarted by the service manager; every node usable) and JOB-SAFE (the sleep job on gpu01 survives; or it dies
only at the slurmd restart, which the project does drained, after the node's jobs ended; or it dies however the
change is applied, at the first step of both `reconfigure` and `restart_slurmctld`, and the route drains).
A route continues where the one before it stopped when that is its beginning (`restart_slurmd` after
`reconfigure`, `restart_all` after `restart_slurmctld`) and nothing died; else the case's starting point is put
back (files written, daemons restarted). A case starts where the one before it ended when it can.

A claim AGREES when it is sufficient and job-safe and no cheaper route is (a claim that restarts daemons the
observation shows are not needed disagrees: stronger than needed; one that is not sufficient disagrees).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from reconciler.drivers.slurm_consequences import (
    conf_file_consequence,
    node_definition_changed,
    parse_slurm_conf,
    slurm_conf_consequence,
)
from reconciler.importer.adopt import CONFIG_FILES, RECONFIGURE, RESTART_SLURMD, spank_notify
from tests.params.consequence_cases import CASES, Case
from tests.params.probe_io import (
    FILES,
    Files,
    Testbed,
    healthy,
    job_alive,
    node_states,
    pids,
    poll,
    reconfigure,
    refused,
    service,
    sh,
    start_job,
    write_files,
)

ROUTES: dict[str, list[str]] = {"nothing": [], "reconfigure": ["reconfigure"], "restart_slurmctld": ["slurmctld"],
                                "restart_slurmd": ["reconfigure", "slurmd"], "restart_all": ["slurmctld", "slurmd"]}
COST = {"nothing": -1, "reconfigure": 0, "restart_slurmctld": 1, "restart_slurmd": 1, "restart_all": 2}
SLURMD_WAIT = 5.0  # seconds a slurmd-side effect may take to show once slurmctld shows the change
SETTLE = {"reconfigure": 5.0, "slurmctld": 30.0, "slurmd": 30.0, "": 5.0}  # bound on nodes usable after a step


@dataclass
class Try:
    """One route's outcome: why it is not sufficient (None: it is), and the step at which the job died."""

    why: str | None
    died_at: str | None = None  # "reconfigure", "slurmctld", "slurmd", or None: the job survived


@dataclass
class Result:
    """What one case needed on one release."""

    kind: str  # the cheapest sufficient and job-safe route; else the cheapest sufficient; else "none worked"
    safe: bool  # kind is job-safe
    tried: dict[str, Try] = field(default_factory=dict)
    unobservable: str | None = None
    documented: str | None = None  # the source that asks for the (stronger) claimed route, which was tried too

    def notes(self) -> list[str]:
        """Why each route that fell short did."""
        return [f"{k}: {t.why or 'the job died at ' + str(t.died_at)}" for k, t in self.tried.items()
                if t.why or t.died_at]


class Prober:
    """Tries routes on one testbed, keeping track of where the nodes stand so as to reset only when needed."""

    def __init__(self, bed: Testbed, baseline: Files) -> None:
        self.bed, self.files = bed, dict(baseline)  # files the daemons run cleanly (when chain is None)
        self.running = list(bed.computes)  # nodes whose slurmd runs
        self.chain: tuple[Files, list[str], str | None] | None = None  # (case start, steps done, job died at)
        self.job: str | None = None
        self.resets = 0

    def reset(self, files: Files, running: list[str]) -> None:
        """Put FILES on every node and restart every daemon (slurmd on RUNNING only); drained nodes resumed."""
        bed = self.bed
        self.resets += 1
        write_files(bed, files)
        service(bed, [n for n in bed.computes if n not in running], "stop", "slurmd")
        service(bed, ["ctl"], "restart", "slurmctld")
        service(bed, running, "restart", "slurmd")  # after slurmctld: it must not mark them down meanwhile

        def back() -> str | None:
            # A drain an earlier try caused outlives restarts (slurmctld saves node state): resume it.
            down = [n for n, s in node_states(bed).items() if n in running and re.search(r"drain|down|drng", s)]
            if down:
                sh(bed, "ctl", f"scontrol update nodename={','.join(down)} state=resume")
            return healthy(bed, running)

        why = poll(back, 60, step=0.5)
        assert why is None, f"testbed did not come back to the starting point: {why}"
        self.files, self.running, self.chain = dict(files), list(running), None

    def ensure_job(self) -> None:
        """The sleep job on gpu01 runs."""
        if self.job is None or not job_alive(self.bed, self.job):
            self.job = start_job(self.bed)

    def route(self, case: Case, start: Files, route: str) -> Try:
        """Apply CASE from START with ROUTE (continuing the chain in progress where it can)."""
        bed, steps = self.bed, ROUTES[route]
        chain = self.chain
        if chain is not None and chain[0] == start and chain[1] and steps[:len(chain[1])] == chain[1]:
            todo, died_at = steps[len(chain[1]):], chain[2]
        else:
            running = [n for n in bed.computes if n not in case.absent]
            if chain is not None or self.files != start or self.running != running:
                self.reset(start, running)
            self.ensure_job()
            service(bed, list(case.removed), "stop", "slurmd")
            write_files(bed, case.edit(dict(start)))
            self.running = [n for n in self.running if n not in case.removed]
            todo, died_at = steps, None
        why = None
        for what in todo:
            why = self.step(what)
            if died_at is None and not job_alive(bed, self.job or ""):
                died_at = what
            if why:
                break
        step_failed = why is not None
        if not why and case.added and not set(case.added) <= set(self.running):
            service(bed, list(case.added), "start", "slurmd")
            self.running += list(case.added)
        if not why:
            settle = SETTLE[todo[-1] if todo else ""] + 10 * bool(case.added)
            why = poll(lambda: refused(bed, self.running) or healthy(bed, self.running), settle, step=0.3,
                       final=lambda answer: answer.startswith("refused"))
        why = why or case.ctld(bed) or poll(lambda: case.slurmd(bed), SLURMD_WAIT, step=0.3)
        if died_at is None and not job_alive(bed, self.job or ""):
            died_at = todo[-1] if todo else "nothing"
        # Going on from here is sound only when every step ran and the daemons stand: the change just does not show.
        clean = not step_failed and healthy(bed, self.running) is None
        self.chain = (start, steps, died_at) if clean else (start, ["(broken)"], died_at)
        return Try(why, died_at)

    def step(self, what: str) -> str | None:
        """One step (reconfigure, or restart slurmctld / every running slurmd); None, or what went wrong (a daemon
        that died on the way: its pid changed where nothing restarted it)."""
        bed = self.bed
        before = pids(bed, self.running)
        if what == "reconfigure":
            why = reconfigure(bed, self.running)
        elif what == "slurmctld":
            service(bed, ["ctl"], "restart", "slurmctld")
            why = poll(lambda: healthy(bed, []), 30)
        else:
            service(bed, self.running, "restart", "slurmd")
            why = None
        after = pids(bed, self.running)
        restarted = {"reconfigure": [], "slurmctld": ["ctl"], "slurmd": self.running}[what]
        died = [n for n in before if n not in restarted and before[n] != after[n]]
        if died:
            daemon = "slurmctld" if "ctl" in died else "slurmd"
            return f"{daemon} died at {what} (on {', '.join(died)}){': ' + why if why else ''}"
        return why

    def finish(self, case: Case, start: Files, ok: bool) -> None:
        """The next case starts from CASE's end when CASE's last route applied it cleanly."""
        if ok and self.chain is not None and self.chain[1] != ["(broken)"]:
            self.files, self.chain = case.edit(dict(start)), None


def measure(prober: Prober, case: Case, start: Files, claim: str) -> Result:
    """The cheapest sufficient and job-safe route for CASE from START, trying CLAIM first among equals."""
    if case.unobservable and (why := case.unobservable(start)):
        return Result("not observable", True, {}, why)
    tried: dict[str, Try] = {}
    order = sorted([r for r in ROUTES if r != "nothing" or claim == "nothing"],
                   key=lambda r: (COST[r], r != claim, r != "restart_slurmd"))
    found = None
    for route in order:
        tried[route] = prober.route(case, start, route)
        if tried[route].why is None and tried[route].died_at in (None, "slurmd"):
            found = route
            break
    if found is None:  # no route keeps the job: then the cheapest sufficient one that drains is job-safe
        found = next((r for r in order if tried[r].why is None and "slurmd" in ROUTES[r]), None)
    sufficient = [r for r in order if r in tried and tried[r].why is None]
    result = Result(found or (sufficient[0] if sufficient else "none worked"), found is not None, tried)
    why = case.documented(prober.bed.slurm) if case.documented else None
    if why and found is not None and claim in ROUTES and COST[claim] > COST[found]:
        tried[claim] = prober.route(case, start, claim)  # the documents' route must work too
        result.documented = why
    last = tried[list(tried)[-1]] if tried else None
    prober.finish(case, start, found is not None and last is not None and last.why is None
                  and last.died_at in (None, "slurmd"))
    return result


def agrees(result: Result, claim: str) -> bool:
    """The claim is sufficient and job-safe, and no cheaper route is (see the module's docstring); or Slurm's
    documents ask for the claimed, stronger route (Result.documented) and it is sufficient and job-safe."""
    if result.unobservable:
        return True
    if result.documented:
        tried = result.tried.get(claim)
        return tried is not None and tried.why is None and tried.died_at in (None, "slurmd")
    return result.safe and claim in result.tried and result.tried[claim].why is None and (
        COST[claim] == COST[result.kind])


def claimed(before: Files, after: Files, family: str, computes: list[str]) -> str:
    """What the project plans for this edit (drivers/slurm_config.py's follow-ups, importer's CONFIG_FILES)."""
    ctld = slurmd = reconf = False
    old, new = before.get("slurm.conf"), after.get("slurm.conf")
    present = kept = computes
    if old != new and new is not None:
        cons = slurm_conf_consequence(old, new, family)
        reconf, ctld, slurmd = cons.reconfigure, cons.restart_slurmctld, cons.restart_all_slurmd
        present = [n for n in computes if n in parse_slurm_conf(new).nodes]  # a removed node gets no restart
        # An added node's slurmd is started, not restarted (the driver's start of a stopped slurmd, as the probe
        # does): only the nodes defined before and after count for a restart.
        kept = [n for n in present if old is None or n in parse_slurm_conf(old).nodes]
        slurmd |= any(node_definition_changed(old, new, node, family) for node in kept)
    for name in FILES[1:]:
        if before.get(name) == after.get(name):
            continue
        if name in ("gres.conf", "cgroup.conf") and after.get(name) is not None:
            for node in kept:
                cons = conf_file_consequence(name, before.get(name), after[name] or "", node, family)
                reconf |= cons.reconfigure
                ctld |= cons.restart_slurmctld
                slurmd |= cons.restart_slurmd_here
            continue
        need = spank_notify(family, False) if name == "plugstack.conf" else CONFIG_FILES.get(name)  # None: a script
        slurmd |= need == RESTART_SLURMD
        reconf |= need == RECONFIGURE
    if ctld and slurmd:
        return "restart_all"
    if ctld:
        return "restart_slurmctld"
    if slurmd:
        return "restart_slurmd"
    return "reconfigure" if reconf else "nothing"


# ---------------------------------------------------------------------------------------------------------------
# The table

RESTARTS = {"reconfigure": "none (reconfigure)", "restart_slurmctld": "slurmctld",
            "restart_slurmd": "every slurmd (after reconfigure)", "restart_all": "slurmctld, then every slurmd",
            "none worked": "none worked", "nothing": "nothing", "not observable": "-"}
LEGEND = """
Observed on real daemons (tests/params/test_observed_consequences_testbed.py). Routes, the project's own:
reconfigure; slurmctld restart; reconfigure then every slurmd restarted (drained first where jobs run);
slurmctld restart then every slurmd. "needs" is the cheapest route that is SUFFICIENT (the change shows on the
daemons, none died, every node usable) and JOB-SAFE (a running job survives, or dies only at the drained slurmd
restart, or dies however the change is applied and the route drains); "job survives" is whether the job lived
through it undrained. A claim AGREES when it is sufficient and job-safe and no cheaper route is: it disagrees
when it is not sufficient or restarts daemons that are not needed (stronger than needed). Not observable on the
testbed: no daemon of the testbed acts on the change; the claim is kept. A claim stronger than the testbed needed
agrees where Slurm's documents ask for it and the testbed cannot show why ("documents: ..."): the claimed route is
then tried too and must be sufficient and job-safe.
"""


@dataclass
class Row:
    """One case on one release: what the daemons needed and what the project claims."""

    case: str
    release: str
    claim: str
    result: Result

    @property
    def agrees(self) -> bool:
        """The claim is what the daemons needed."""
        return agrees(self.result, self.claim)


def markdown(rows: list[Row]) -> str:
    """The observed table next to the claimed one, a row per case and release, with the legend."""
    out = ["| change | Slurm | reconfigure enough? | needs (restarts, in order) | job survives | project claims "
           "| agrees |", "| --- | --- | --- | --- | --- | --- | --- |"]
    names = [c.name for c in CASES]
    for row in sorted(rows, key=lambda r: (names.index(r.case), r.release)):
        res = row.result
        if res.unobservable:
            out.append(f"| {row.case} | {row.release} | - | {res.unobservable} | - | {RESTARTS[row.claim]} "
                       f"| kept |")
            continue
        reconf = res.kind in ("nothing", "reconfigure")
        need = RESTARTS[res.kind] + ("" if res.safe or res.kind == "none worked" else " (kills running jobs)")
        if res.safe and res.tried[res.kind].died_at not in (None, "slurmd"):
            need += " (no route keeps running jobs)"
        job = "-" if res.kind == "none worked" else "yes" if res.tried[res.kind].died_at is None else "**no**"
        claim = RESTARTS[row.claim] + (f" (documents: {res.documented})" if res.documented else "")
        out.append(f"| {row.case} | {row.release} | {'yes' if reconf else 'no'} | {need} | {job} | "
                   f"{claim} | {'yes' if row.agrees else '**no**'} |")
    return "\n".join(out) + "\n" + LEGEND


def disagreements(rows: list[Row]) -> list[str]:
    """A line per row whose claim is not what the daemons needed, with what fell short."""
    return [f"{r.case} on {r.release}: the project claims {r.claim}, the daemons needed {r.result.kind}"
            f" ({'; '.join(r.result.notes()) or 'the claimed steps were not needed'})" for r in rows if not r.agrees]
