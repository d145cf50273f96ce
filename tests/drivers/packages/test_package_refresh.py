"""The metadata refresh before a node's package transaction (drivers/package_refresh.py), on recorded facts: a
repository file the plan adds, metadata older than cache_valid_time, update_cache; what the plan says and runs.
The testbed side (real apt and dnf, one apply converging): test_package_refresh_testbed.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.drivers.managed_files import ManagedFilesDriver
from reconciler.drivers.package_refresh import COMMAND, REFRESH_PHASE, repo_manager
from reconciler.drivers.packages import PackagesDriver
from reconciler.drivers.slurm_upgrade import SlurmUpgradeDriver
from reconciler.engine.context import Context
from reconciler.engine.driver import Driver
from reconciler.engine.plan import Plan
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_text
from reconciler.facts import packages as pkgfacts
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, FileFact, NodeFacts
from tests.drivers.base_state import write_state
from tests.drivers.packages.test_packages_driver import DNF_LIST, MADISON, RPM_Q, STATUS, commands

SOURCES = "/etc/apt/sources.list.d/extra.sources"
YUM = "/etc/yum.repos.d/extra.repo"
REPO_FILES = f"""\
files:
  - path: {SOURCES}
    nodes: "gpu[01-02]"
    content: "Types: deb\\nURIs: http://ctl:8873/extra/deb/\\nSuites: ./\\nSigned-By: /etc/apt/keyrings/extra.asc\\n"
  - path: {YUM}
    nodes: "gpu[01-02]"
    content: "[extra]\\nbaseurl=http://ctl:8873/extra/rpm/\\n"
"""


def answer(backend: str, asked: str, cache: str | None = None, dnf_list: str = "list 0\n" + DNF_LIST) -> dict:
    """The snippet's answer from recorded outputs; CACHE: the metadata age section."""
    parts = (["backend apt", "status\n" + STATUS, "madison 0\n" + MADISON] if backend == "apt"
             else ["backend dnf", "rpm 1\n" + RPM_Q, dnf_list])
    parts += ([f"cache\n{cache}"] if cache is not None else []) + ["asked\n" + asked]
    return {"rc": 0, "stdout": pkgfacts.SEP.join(parts), "stderr": ""}


def plan_with(tmp_path: Path, yaml: str, reply: dict, present: tuple[str, ...] = ()) -> Plan:
    """Plan YAML with the files, packages and Slurm upgrade drivers; every node answers REPLY for its packages and
    has the managed files of PRESENT already as desired (the others missing)."""
    root = write_state(tmp_path / "repo", yaml)
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    drivers: list[Driver] = [ManagedFilesDriver(), PackagesDriver(), SlurmUpgradeDriver()]
    for name in node_specs(ctx.state):
        facts = NodeFacts(node=name, reachable=True)
        for item in ctx.state.files:
            if item.path in present:
                text = item.content or ""
                facts.files[item.path] = FileFact(exists=True, sha256=hashlib.sha256(text.encode()).hexdigest(),
                                                  mode="0644", owner="root", group="root", content=text)
            else:
                facts.files[item.path] = FileFact(exists=False)
        ctx.facts.nodes[name] = facts
        PackagesDriver().absorb(ctx, ctx.facts, name, facts, {pkgfacts.FACTS_KEY: reply})
    return make_plan(ctx, drivers)


def packages_of(plan: Plan, node: str = "gpu01") -> list:
    return [c for c in plan.changes if c.node == node and c.driver == "packages" and c.action != "ok"]


def test_repository_added_with_its_package_installs_after_a_refresh_in_the_same_apply(tmp_path: Path) -> None:
    """apt: the sources file added in this commit and a package only it offers: no error; `apt-get update` runs
    after the files are written and before the transaction, which installs the package by name; the plan says
    so and why. Before the fix this plan was an error (`not available ... apt-get update may not have run`)."""
    yaml = REPO_FILES + 'packages:\n  - nodes: "gpu[01-02]"\n    packages: {extra-standin: present}\n'
    plan = plan_with(tmp_path, yaml, answer("apt", "extra-standin"))
    assert not plan.errors, plan.errors
    [change] = packages_of(plan)
    assert change.action == "create" and change.phase > REFRESH_PHASE
    assert change.summary == "install extra-standin (the newest version offered after the refresh)"
    assert commands(change).endswith("--no-remove install extra-standin")
    refresh = [f for f in plan.followups if f.node == "gpu01" and f.label == "apt-get update"]
    assert len(refresh) == 1 and refresh[0].target == COMMAND["apt"] and refresh[0].phase == REFRESH_PHASE
    assert refresh[0].reasons == [f"{SOURCES} added"]
    assert not [f for f in plan.followups if f.label == "dnf makecache"]  # the yum file: not this node's manager
    text = render_text(plan)
    assert "runs `apt-get update` on gpu[01-02]" in text and f"{SOURCES} added" in text, text


def test_without_a_repository_change_a_package_not_offered_is_still_an_error(tmp_path: Path) -> None:
    """The same package with the repository file already in place and no refresh asked for: the plan cannot
    know a refresh would help, so it is the error it was (naming apt-get update), and no refresh is planned."""
    yaml = REPO_FILES + 'packages:\n  - nodes: "gpu[01-02]"\n    packages: {extra-standin: present}\n'
    plan = plan_with(tmp_path, yaml, answer("apt", "extra-standin"), present=(SOURCES, YUM))
    [change] = packages_of(plan)
    assert change.action == "error" and "`apt-get update` may not have run" in change.summary
    assert not plan.followups and any("gpu01" in e for e in plan.errors)


def test_dnf_without_a_cache_for_the_new_repository_installs_after_makecache(tmp_path: Path) -> None:
    """dnf: `--cacheonly list` fails for the new repository (real dnf stderr); with the repo file added the
    transaction installs after `dnf makecache --refresh`; an exact version goes by name-version."""
    yaml = REPO_FILES + (
        'packages:\n  - nodes: "gpu[01-02]"\n    packages: {extra-standin: "1.0-1", hello-standin: present}\n')
    no_cache = "list 1\n" + (Path(__file__).parent.parent.parent / "facts" / "dnf" / "list-no-cache.stderr").read_text()
    plan = plan_with(tmp_path, yaml, answer("dnf", "extra-standin hello-standin", dnf_list=no_cache))
    assert not plan.errors, plan.errors
    [change] = packages_of(plan)
    assert "install extra-standin (1.0-1 after the refresh)" in change.summary
    assert "dnf -y -q install extra-standin-1.0-1 hello-standin" in commands(change)
    [refresh] = [f for f in plan.followups if f.node == "gpu01"]  # the apt sources file: not this node's manager
    assert refresh.label == "dnf makecache" and refresh.reasons == [f"{YUM} added"]
    assert "makecache --refresh" in refresh.target


def test_stale_cache_is_refreshed_fresh_one_is_not(tmp_path: Path) -> None:
    """cache_valid_time 3600: metadata 2 h old is refreshed (the plan says how old) even with nothing to
    install; 10 min old, nothing at all (apply twice: the second is empty); never refreshed: refreshed."""
    yaml = 'packages:\n  - nodes: "gpu[01-02]"\n    cache_valid_time: 3600\n    packages: {tzdata: present}\n'
    stale = plan_with(tmp_path / "a", yaml, answer("apt", "", cache="7200"))
    [step] = [f for f in stale.followups if f.node == "gpu01"]
    assert step.label == "apt-get update" and step.reasons == [
        "the metadata is 2 h old, older than packages[0] cache_valid_time: 3600"]
    assert not packages_of(stale) and stale.has_changes
    fresh = plan_with(tmp_path / "b", yaml, answer("apt", "", cache="600"))
    assert not fresh.followups and not fresh.has_changes
    never = plan_with(tmp_path / "c", yaml, answer("apt", "", cache="none"))
    assert [f.reasons for f in never.followups if f.node == "gpu01"] == [
        ["the metadata was never refreshed (packages[0] cache_valid_time: 3600)"]]


def test_update_cache_refreshes_only_before_a_transaction(tmp_path: Path) -> None:
    """update_cache without cache_valid_time: a converged node gets no refresh (apply twice is empty); a node
    with a transaction gets one, saying why; the age is not even read (no cache_valid_time)."""
    converged = 'packages:\n  - nodes: "gpu[01-02]"\n    update_cache: true\n    packages: {tzdata: present}\n'
    plan = plan_with(tmp_path / "a", converged, answer("apt", ""))
    assert not plan.followups and not plan.has_changes
    moving = converged.replace("tzdata: present", 'tzdata: "2026b-0+deb12u1"')
    plan = plan_with(tmp_path / "b", moving, answer("apt", "tzdata"))
    [step] = [f for f in plan.followups if f.node == "gpu01"]
    assert step.reasons == ["packages[0] update_cache: before the node's package transaction"]
    assert "→ 2026b-0+deb12u1" in packages_of(plan)[0].summary  # offered already: the exact version planned
    for yaml, asked in ((converged, False), (converged.replace("update_cache: true", "cache_valid_time: 60"), True)):
        ctx = Context(loaded=load_dir(write_state(tmp_path / f"r{asked}", yaml)), source="test")
        req = FactRequest()
        PackagesDriver().request(ctx, "gpu01", req)
        assert ("'cache': True" in req.python[pkgfacts.FACTS_KEY]) == asked


def test_what_waits_for_the_next_plan_says_why(tmp_path: Path) -> None:
    """A refresh is planned, yet some moves cannot go before the plan sees the offers: a Slurm package (the
    release rules need its version), an installed package at a glob (upgrade or downgrade?), an exact version
    below the installed one (a downgrade, refused as always). An installed one at a higher exact version goes."""
    base = REPO_FILES + 'packages:\n  - nodes: "gpu[01-02]"\n    packages: {PKG}\n'
    cases = {"{slurmd: present}": "the Slurm release rules check the version",
             '{tzdata: "2099.*"}': "only an exact version tells an upgrade from a downgrade",
             '{tzdata: "2020a-1"}': "is a downgrade: set allow_downgrade: true on packages[0]"}
    for index, (spec, says) in enumerate(cases.items()):
        plan = plan_with(tmp_path / str(index), base.replace("{PKG}", spec), answer("apt", spec.split(":")[0][1:]))
        [change] = packages_of(plan)
        assert change.action == "error" and says in change.summary, (spec, change.summary)
    plan = plan_with(tmp_path / "up", base.replace("{PKG}", '{tzdata: "2099a-1"}'), answer("apt", "tzdata"))
    [change] = packages_of(plan)
    assert change.summary == "tzdata 2025b-0+deb12u2 → 2099a-1 (after the refresh)", change.summary
    assert "'tzdata=2099a-1'" in commands(change) or "tzdata=2099a-1" in commands(change)


def test_repository_paths() -> None:
    """Which files make whose metadata stale."""
    assert repo_manager("/etc/apt/sources.list") == "apt" and repo_manager("/etc/apt/keyrings/x.asc") == "apt"
    assert repo_manager("/etc/pki/rpm-gpg/RPM-GPG-KEY-x") == "dnf" and repo_manager("/etc/yum.repos.d/a.repo") == "dnf"
    assert repo_manager("/etc/apt/sources.list.bak") is None and repo_manager("/etc/apt/apt.conf.d/99x") is None
