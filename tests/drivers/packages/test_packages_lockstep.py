"""One transaction per node (recorded testbed facts: the stand-in pair at 550.127.05-1 with the driver held, as real
dpkg and apt-cache madison showed them): every version change of a node in one apt-get / dnf, one change per node
folded across nodes, the most demanding `needs` of the transaction, one before-image, holds of named packages only."""

from __future__ import annotations

from pathlib import Path

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.engine.context import Context
from reconciler.engine.plan import Change
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_text
from reconciler.facts import packages as pkgfacts
from reconciler.facts.models import ClusterFacts, NodeFacts
from tests.drivers.base_state import write_state
from tests.drivers.packages.test_packages_driver import DRIVER, FACTS, commands, dnf_answer

STATUS = (FACTS / "dpkg_status" / "testbed-standins-550-driver-held.status").read_text()
MADISON = (FACTS / "apt_madison" / "testbed-standins.txt").read_text()
OLD, NEW = "550.127.05-1", "570.86.15-1"
PAIR = "nvidia-driver-standin", "nvidia-fabricmanager-standin"


def answer(asked: str) -> dict[str, object]:
    """The snippet's answer on a testbed apt node with the pair at 550 (driver held)."""
    parts = ["backend apt", "status\n" + STATUS, "madison 0\n" + MADISON, "asked\n" + asked]
    return {"rc": 0, "stdout": pkgfacts.SEP.join(parts), "stderr": ""}


def planned(tmp_path: Path, yaml: str, reply: dict[str, object], nodes_extra: str = "") -> tuple[list[Change], str]:
    """Changing changes and the plan text for YAML, every node answering REPLY."""
    root = write_state(tmp_path / "repo", yaml)
    if nodes_extra:
        (root / "nodes.yaml").write_text((root / "nodes.yaml").read_text() + nodes_extra)
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    for name in node_specs(ctx.state):
        ctx.facts.nodes[name] = NodeFacts(node=name, reachable=True)
        DRIVER.absorb(ctx, ctx.facts, name, ctx.facts.nodes[name], {pkgfacts.FACTS_KEY: reply})
    plan = make_plan(ctx, [DRIVER])
    return [c for c in plan.changes if c.action != "ok"], render_text(plan)


def pair_yaml(version: str, allow_downgrade: bool = False, fm_needs: str = "") -> str:
    fm = f"{{version: \"{version}\"{', needs: ' + fm_needs if fm_needs else ''}}}"
    return (f'packages:\n  - nodes: "gpu[01-02]"\n    allow_downgrade: {str(allow_downgrade).lower()}\n'
            f'    packages:\n      {PAIR[0]}: {{version: "{version}", needs: reboot}}\n      {PAIR[1]}: {fm}\n')


def test_pair_upgrade_is_one_transaction_folded(tmp_path: Path) -> None:
    """driver and fabric manager 550 -> 570: one change per node, one apt-get naming both, the summary listing
    both once for gpu[01-02], needs reboot; the human's hold on the driver lifted around it and put back."""
    changes, text = planned(tmp_path, pair_yaml(NEW), answer(" ".join(PAIR)))
    assert sorted(c.node for c in changes) == ["gpu01", "gpu02"] and {c.resource for c in changes} == {"packages"}
    summary = f"{PAIR[0]} {OLD} → {NEW}, {PAIR[1]} {OLD} → {NEW} (needs a reboot)"
    assert {c.summary for c in changes} == {summary} and {c.needs for c in changes} == {"reboot"}
    assert "gpu[01-02]:" in text and text.count(summary) == 1, text
    assert "Needs a reboot on gpu[01-02]" in text
    change = changes[0]
    assert len(change.ops) == 1
    cmd = commands(change)
    assert cmd.count("apt-get") == 1
    assert f"--no-remove install {PAIR[0]}={NEW} {PAIR[1]}={NEW}" in cmd and "--allow-downgrades" not in cmd
    assert cmd.startswith(f"apt-mark unhold {PAIR[0]} >/dev/null && ")  # only the held one, only named ones
    assert cmd.endswith(f"apt-mark hold {PAIR[0]} >/dev/null")
    assert change.restore is not None and change.restore.check is not None
    back = commands(change.restore)  # type: ignore[arg-type]
    assert back.count("apt-get") == 1 and f"--allow-downgrades --no-remove install {PAIR[0]}={OLD} {PAIR[1]}={OLD}" in back
    assert back.endswith(f"apt-mark hold {PAIR[0]} >/dev/null")
    assert f"installed {OLD}" in change.restore.check and PAIR[1] in change.restore.check


def test_pair_downgrade_needs_allow_and_is_never_half_done(tmp_path: Path) -> None:
    """570 -> 550 without allow_downgrade: an error per package and no command at all on the node (the other
    package of the pair must not move alone); with it: one apt-get --allow-downgrades for both."""
    high = STATUS.replace(OLD, NEW)
    reply = {"rc": 0, "stdout": pkgfacts.SEP.join(["backend apt", "status\n" + high, "madison 0\n" + MADISON,
                                                   "asked\n" + " ".join(PAIR)]), "stderr": ""}
    changes, _ = planned(tmp_path / "a", pair_yaml(OLD), reply)
    assert {c.action for c in changes} == {"error"} and not any(c.ops for c in changes)
    assert len(changes) == 4 and all("is a downgrade: set allow_downgrade: true on packages[0]" in c.summary
                                     for c in changes)
    changes, _ = planned(tmp_path / "b", pair_yaml(OLD, allow_downgrade=True), reply)
    assert len(changes) == 2 and {c.action for c in changes} == {"update"}
    cmd = commands(changes[0])
    assert cmd.count("apt-get") == 1 and f"--allow-downgrades --no-remove install {PAIR[0]}={OLD} {PAIR[1]}={OLD}" in cmd


def test_most_demanding_needs_wins(tmp_path: Path) -> None:
    """A transaction with a package needing a driver reload and one needing a reboot needs a reboot; a package
    with no needs in the same transaction is held with it."""
    yaml = pair_yaml(NEW).replace("needs: reboot", "needs: driver-reload")
    changes, _ = planned(tmp_path / "a", yaml, answer(" ".join(PAIR)))
    assert {c.needs for c in changes} == {"driver-reload"}
    assert changes[0].summary.endswith("(needs a driver reload)")
    yaml = pair_yaml(NEW, fm_needs="reboot").replace("needs: reboot}\n      nvidia-fab", "needs: driver-reload}\n"
                                                      "      nvidia-fab", 1)
    changes, _ = planned(tmp_path / "b", yaml, answer(" ".join(PAIR)))
    assert {c.needs for c in changes} == {"reboot"}


def test_hold_only_and_unnamed_holds(tmp_path: Path) -> None:
    """The pair converged, hold: true on the fabric manager: a hold, no package manager run; the driver's hold
    (a human's, hold unset) is neither lifted nor touched."""
    yaml = (f'packages:\n  - nodes: gpu01\n    packages:\n      {PAIR[0]}: "{OLD}"\n'
            f'      {PAIR[1]}: {{version: "{OLD}", hold: true}}\n')
    [change] = planned(tmp_path, yaml, answer(""))[0]
    assert change.summary == f"hold {PAIR[1]}" and change.resource == f"package {PAIR[1]}"
    assert commands(change) == f"apt-mark hold {PAIR[1]} >/dev/null"


def test_dnf_install_and_remove_in_one_command(tmp_path: Path) -> None:
    """dnf: the version changes in one `dnf install`, a removal after it with --noautoremove (what the removed
    package pulled in stays, as with apt-get remove); the before-image reinstalls and removes in the same way."""
    yaml = ('packages:\n  - nodes: cpu02\n    packages:\n      nvidia-driver-standin: absent\n'
            '      hello-standin: present\n')
    nodes = '  - {name: cpu02, package_manager: dnf}\n'
    [change] = planned(tmp_path, yaml, dnf_answer("hello-standin"), nodes)[0]
    assert change.summary == "remove nvidia-driver-standin 550.127.05-1, install hello-standin 1:2.10-3"
    cmd = commands(change)
    assert cmd.startswith("timeout 300 dnf -y -q versionlock delete nvidia-driver-standin >/dev/null && "
                          "{ timeout 300 dnf -y -q install hello-standin-1:2.10-3 && "
                          "timeout 300 dnf -y -q remove --noautoremove nvidia-driver-standin; rc=$?;")
    assert change.restore is not None
    back = commands(change.restore)  # type: ignore[arg-type]
    assert ("install nvidia-driver-standin-550.127.05-1 && timeout 300 dnf -y -q remove --noautoremove "
            "hello-standin") in back
    assert back.endswith("versionlock add nvidia-driver-standin >/dev/null")  # locked before: locked again


def test_dnf_list_without_cache_is_an_error_not_an_empty_repository() -> None:
    """Real dnf stderr: `--cacheonly` with no metadata cache is an error naming `dnf makecache`; `No matching
    Packages` is an answer (nothing offered)."""
    names = {"nvidia-driver-standin"}
    for fixture, error in (("list-no-cache.stderr", True), ("list-no-match.stderr", False)):
        body = (FACTS / "dnf" / fixture).read_text()
        parts = ["backend dnf", "rpm 1\npackage nvidia-driver-standin is not installed\n", "list 1\n" + body,
                 "asked\nnvidia-driver-standin"]
        facts = pkgfacts.parse_answer({"rc": 0, "stdout": pkgfacts.SEP.join(parts), "stderr": ""}, names)
        # kept apart from the other errors: a metadata refresh planned before the transaction answers it
        assert bool(facts.cache_error) == error and not facts.errors, (fixture, facts.cache_error, facts.errors)
        assert facts.candidates == {"nvidia-driver-standin": []}
        if error:
            assert facts.cache_error and "dnf makecache" in facts.cache_error
            assert "Cache-only enabled but no cache" in facts.cache_error


def test_versionlock_file_parsed() -> None:
    """The lock list file as Debian's dnf-plugins-core wrote it on a testbed node (a comment, a blank line, one
    lock): the facts read this file, never `dnf versionlock list` (it refreshes the repositories' cache)."""
    assert pkgfacts.parse_versionlock((FACTS / "dnf" / "versionlock.list").read_text()) == {"nvidia-driver-standin"}
    assert pkgfacts.parse_versionlock("!nvidia-driver-standin-0:570.86.15-1.*\n") == set()
    snippet = pkgfacts.snippet("dnf", {"x": ("present", "present")}, True)
    assert "run(\"dnf -q versionlock" not in snippet and "/etc/dnf/plugins/versionlock.conf" in snippet
