"""The packages driver on recorded facts (tests/facts/: real dpkg status, apt-cache madison, rpm -q, dnf list and
versionlock outputs fed through the snippet's answer format): desired state + facts -> changes and commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.drivers.packages import PackagesDriver
from reconciler.engine.context import Context
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_text
from reconciler.facts import packages as pkgfacts
from reconciler.facts.models import ClusterFacts, NodeFacts
from tests.drivers.base_state import write_state

FACTS = Path(__file__).parent.parent.parent / "facts"
STATUS = (FACTS / "dpkg_status" / "host-tzdata-held.status").read_text()  # tzdata 2025b-0+deb12u2, held
MADISON = (FACTS / "apt_madison" / "tzdata-hello-missing.txt").read_text()  # tzdata 2026f/2026b/2025b, hello
RPM_Q = (FACTS / "rpm_q" / "one-installed-one-missing.txt").read_text()  # nvidia-driver-standin 550.127.05-1
DNF_LIST = (FACTS / "dnf" / "list-showduplicates.txt").read_text()
VERSIONLOCK = (FACTS / "dnf" / "versionlock-list.txt").read_text()  # nvidia-driver-standin locked
DRIVER = PackagesDriver()


def apt_answer(asked: str) -> dict[str, object]:
    """The snippet's answer on an apt node, from the recorded outputs."""
    parts = ["backend apt", "status\n" + STATUS, "madison 0\n" + MADISON, "asked\n" + asked]
    return {"rc": 0, "stdout": pkgfacts.SEP.join(parts), "stderr": ""}


def dnf_answer(asked: str) -> dict[str, object]:
    """The snippet's answer on a dnf node, from the recorded outputs."""
    parts = ["backend dnf", "rpm 1\n" + RPM_Q, "versionlock 0\n" + VERSIONLOCK, "list 0\n" + DNF_LIST,
             "asked\n" + asked]
    return {"rc": 0, "stdout": pkgfacts.SEP.join(parts), "stderr": ""}


def plan_for(tmp_path: Path, packages_yaml: str, answer: dict[str, object], nodes_extra: str = "") -> list[Change]:
    """Load the base state plus PACKAGES_YAML, give every node ANSWER as its package facts, plan."""
    root = write_state(tmp_path / "repo", packages_yaml)
    if nodes_extra:
        (root / "nodes.yaml").write_text((root / "nodes.yaml").read_text() + nodes_extra)
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    for name in node_specs(ctx.state):
        facts = NodeFacts(node=name, reachable=True)
        ctx.facts.nodes[name] = facts
        DRIVER.absorb(ctx, ctx.facts, name, facts, {pkgfacts.FACTS_KEY: answer})
    plan = make_plan(ctx, [DRIVER])
    return [c for c in plan.changes if c.action != "ok"]


def one_per_node(changes: list[Change]) -> Change:
    """The changes are alike on gpu01 and gpu02: return gpu01's."""
    assert sorted(c.node for c in changes) == ["gpu01", "gpu02"], [(c.node, c.summary) for c in changes]
    assert len({c.summary for c in changes}) == 1
    return next(c for c in changes if c.node == "gpu01")


def commands(change: Change) -> str:
    """The change's shell commands, one a line."""
    return "\n".join(op.command for op in change.ops if isinstance(op, RunCommand))


def test_pin_on_held_package_unholds_installs_rehold(tmp_path: Path) -> None:
    """tzdata (held by a human) pinned to another version: one update per node, the same summary (folded),
    non-interactive, unheld and held again in one command, the hold put back when apt fails."""
    yaml = 'packages:\n  - nodes: "gpu[01-02]"\n    packages: {tzdata: "2026b-0+deb12u1"}\n'
    change = one_per_node(plan_for(tmp_path, yaml, apt_answer("tzdata")))
    assert change.action == "update" and change.summary == "tzdata 2025b-0+deb12u2 → 2026b-0+deb12u1"
    cmd = commands(change)
    assert cmd.startswith("apt-mark unhold tzdata >/dev/null && { DEBIAN_FRONTEND=noninteractive apt-get")
    assert cmd.endswith("rc=$?; if [ $rc -ne 0 ]; then apt-mark hold tzdata >/dev/null; fi; [ $rc -eq 0 ]; } "
                        "&& apt-mark hold tzdata >/dev/null")
    for word in ("DEBIAN_FRONTEND=noninteractive", "--force-confdef", "--force-confold", "--no-install-recommends",
                 "DPkg::Lock::Timeout=", "--no-remove install tzdata=2026b-0+deb12u1"):
        assert word in cmd
    assert "--allow-downgrades" not in cmd and "--allow-change-held-packages" not in cmd
    assert change.restore is not None and "tzdata=2025b-0+deb12u2" in commands(change.restore)  # type: ignore[arg-type]
    assert change.restore.check is not None and "installed 2025b-0+deb12u2" in change.restore.check


def test_plan_text_folds_nodes(tmp_path: Path) -> None:
    """The plan shows the transition once, on gpu[01-02]."""
    root = write_state(tmp_path / "repo", 'packages:\n  - roles: [compute]\n    packages: {tzdata: "2026*"}\n')
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    for name in node_specs(ctx.state):
        ctx.facts.nodes[name] = NodeFacts(node=name, reachable=True)
        DRIVER.absorb(ctx, ctx.facts, name, ctx.facts.nodes[name], {pkgfacts.FACTS_KEY: apt_answer("tzdata")})
    text = render_text(make_plan(ctx, [DRIVER]))
    assert "tzdata 2025b-0+deb12u2 → 2026f-0+deb12u1" in text and "gpu[01-02]" in text, text


def test_install_remove_glob(tmp_path: Path) -> None:
    """present -> install the newest offered; absent -> remove; a glob -> the newest matching (2026f > 2026b);
    all three in one apt-get (removal by `name-`, so no --no-remove), one before-image undoing all three."""
    yaml = ('packages:\n  - nodes: gpu01\n    packages: {hello: present, zstd: absent, tzdata: "2026*", '
            '"apt": "2.6.*"}\n')
    [change] = plan_for(tmp_path, yaml, apt_answer("hello tzdata"))  # apt 2.6.1 matches: not in it
    assert change.resource == "packages" and change.action == "update"
    assert change.summary == ("install hello 2.10-3, remove zstd 1.5.4+dfsg2-5, "
                              "tzdata 2025b-0+deb12u2 → 2026f-0+deb12u1")
    cmd = commands(change)
    assert cmd.count("apt-get") == 1 and "install hello=2.10-3 tzdata=2026f-0+deb12u1 zstd-" in cmd
    assert "--no-remove" not in cmd and cmd.startswith("apt-mark unhold tzdata")
    assert change.restore is not None
    back = commands(change.restore)  # type: ignore[arg-type]
    assert back.count("apt-get") == 1
    assert "--allow-downgrades install zstd=1.5.4+dfsg2-5 tzdata=2025b-0+deb12u2 hello-" in back
    assert back.endswith("apt-mark hold tzdata >/dev/null")  # held before: held again when put back


def test_downgrade_refused_unless_allowed(tmp_path: Path) -> None:
    """A lower version is an error naming package, versions and the key; allowed, it runs --allow-downgrades."""
    yaml = 'packages:\n  - nodes: gpu01\n    packages: {tzdata: "2025b-0+deb12u1"}\n'
    [change] = plan_for(tmp_path / "a", yaml, apt_answer("tzdata"))
    assert change.action == "error" and not change.ops
    assert change.summary == ("tzdata 2025b-0+deb12u2 → 2025b-0+deb12u1 is a downgrade: set allow_downgrade: true "
                              "on packages[0] to allow it")
    yaml = 'packages:\n  - nodes: gpu01\n    allow_downgrade: true\n    packages: {tzdata: "2025b-0+deb12u1"}\n'
    [change] = plan_for(tmp_path / "b", yaml, apt_answer("tzdata"))
    assert change.action == "update" and "--allow-downgrades --no-remove install tzdata=2025b-0+deb12u1" in commands(change)


def test_unavailable_version_is_a_clear_error(tmp_path: Path) -> None:
    """A version no repository offers: an error saying what is offered and that apt-get update may be missing."""
    yaml = 'packages:\n  - nodes: gpu01\n    packages: {tzdata: "2030a-0", nosuch-pkg: present}\n'
    changes = {c.resource: c for c in plan_for(tmp_path, yaml, apt_answer("tzdata nosuch-pkg"))}
    assert changes["package tzdata"].action == "error"
    assert "tzdata 2030a-0 is not available from gpu01's repositories (offered: 2026f-0+deb12u1, " \
           "2026b-0+deb12u1, 2025b-0+deb12u1); `apt-get update` may not have run" in changes["package tzdata"].summary
    assert "(offered: none)" in changes["package nosuch-pkg"].summary


def test_converged_and_hold_changes(tmp_path: Path) -> None:
    """Installed as wanted: nothing; hold: true on an unheld package -> hold; hold: false on a held one ->
    unhold (one change, no package manager run); hold unset keeps a human's hold."""
    yaml = ('packages:\n  - nodes: gpu01\n    packages:\n      tzdata: {version: "2025b-0+deb12u2"}\n'
            '      zstd: present\n')
    assert plan_for(tmp_path / "a", yaml, apt_answer("")) == []
    yaml = ('packages:\n  - nodes: gpu01\n    packages:\n      tzdata: {version: present, hold: false}\n'
            '      zstd: {hold: true}\n')
    [change] = plan_for(tmp_path / "b", yaml, apt_answer(""))
    assert change.summary == "unhold tzdata, hold zstd" and change.action == "update"
    assert commands(change) == "apt-mark hold zstd >/dev/null && apt-mark unhold tzdata >/dev/null"
    assert change.restore is not None and change.restore.check is None
    assert commands(change.restore) == "apt-mark hold tzdata >/dev/null && apt-mark unhold zstd >/dev/null"  # type: ignore[arg-type]


def test_needs_is_data_and_words(tmp_path: Path) -> None:
    """needs: reboot goes to Change.needs and to the summary."""
    yaml = 'packages:\n  - nodes: gpu01\n    packages: {tzdata: {version: "2026b-0+deb12u1", needs: reboot}}\n'
    [change] = plan_for(tmp_path, yaml, apt_answer("tzdata"))
    assert change.needs == "reboot"
    assert change.summary == "tzdata 2025b-0+deb12u2 → 2026b-0+deb12u1 (needs a reboot)"


def test_dnf_locked_package_upgraded_in_one_command(tmp_path: Path) -> None:
    """dnf (recorded rpm -q, dnf list, versionlock list): a locked package unlocked, installed at the newest
    version the glob matches, locked again; a package with an epoch installed by its full EVR."""
    yaml = ('packages:\n  - nodes: cpu01\n    packages:\n      nvidia-driver-standin: {version: "570.86.*", '
            'hold: true, needs: driver-reload}\n      hello-standin: present\n')
    nodes = '  - {name: cpu02, package_manager: dnf}\n'
    changes = {c.resource: c for c in plan_for(tmp_path, yaml.replace("cpu01", "cpu02"),
                                               dnf_answer("nvidia-driver-standin hello-standin"), nodes)}
    [change] = changes.values()
    assert change.summary == ("nvidia-driver-standin 550.127.05-1 → 570.86.15-1, install hello-standin 1:2.10-3 "
                              "(needs a driver reload)")
    assert change.needs == "driver-reload"
    assert commands(change) == (
        "timeout 300 dnf -y -q versionlock delete nvidia-driver-standin >/dev/null && "
        "{ timeout 300 dnf -y -q install nvidia-driver-standin-570.86.15-1 hello-standin-1:2.10-3; rc=$?; "
        "if [ $rc -ne 0 ]; then timeout 300 dnf -y -q versionlock add nvidia-driver-standin >/dev/null; fi; "
        "[ $rc -eq 0 ]; } && timeout 300 dnf -y -q versionlock add nvidia-driver-standin >/dev/null")


def test_two_entries_disagreeing_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two entries selecting one node with different specs for one package: an error, nothing applied. Validate
    refuses such a state (tests/desired/test_section_checks.py); the driver does not rely on it."""
    monkeypatch.setattr("reconciler.desired.loader.cross_check", lambda state: [])
    yaml = ('packages:\n  - nodes: gpu01\n    packages: {tzdata: present}\n'
            '  - roles: [compute]\n    packages: {tzdata: "2026b-0+deb12u1"}\n')
    changes = plan_for(tmp_path, yaml, apt_answer("tzdata"))
    assert [c.action for c in changes if c.node == "gpu01"] == ["error"]
    assert "packages[0] and packages[1] want different things on gpu01" in changes[0].summary


def test_failed_facts_are_errors_not_guesses(tmp_path: Path) -> None:
    """A snippet that failed: an error per package saying why; no op."""
    yaml = 'packages:\n  - nodes: gpu01\n    packages: {tzdata: present}\n'
    [change] = plan_for(tmp_path, yaml, {"rc": 1, "stdout": "", "stderr": "OSError: boom"})
    assert change.action == "error" and "OSError: boom" in change.summary and not change.ops


@pytest.mark.parametrize("fixture, expect", [
    ("host-tzdata-held.status", {"tzdata": ("2025b-0+deb12u2", True), "apt": ("2.6.1", False)})])
def test_parse_dpkg_status(fixture: str, expect: dict[str, tuple[str, bool]]) -> None:
    """Real dpkg status stanzas: version and the hold selection."""
    found = pkgfacts.parse_dpkg_status((FACTS / "dpkg_status" / fixture).read_text(), set(expect))
    assert {n: (i.version, i.held) for n, i in found.items()} == expect


def test_parse_recorded_tool_outputs() -> None:
    """Real madison, rpm -q, dnf list and versionlock outputs."""
    assert pkgfacts.parse_madison(MADISON) == {"tzdata": ["2026f-0+deb12u1", "2026b-0+deb12u1", "2025b-0+deb12u1"],
                                               "hello": ["2.10-3"]}
    assert {n: i.version for n, i in pkgfacts.parse_rpm_q(RPM_Q).items()} == {"nvidia-driver-standin": "550.127.05-1"}
    both = (FACTS / "rpm_q" / "both-installed-epoch.txt").read_text()
    assert pkgfacts.parse_rpm_q(both)["hello-standin"].version == "1:2.10-3"
    assert pkgfacts.parse_dnf_list(DNF_LIST) == {"hello-standin": ["1:2.10-3"],
                                                 "nvidia-driver-standin": ["550.127.05-1", "570.86.15-1"]}
    assert pkgfacts.parse_versionlock(VERSIONLOCK) == {"nvidia-driver-standin"}
