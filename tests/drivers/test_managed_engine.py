"""Managed files with the other drivers and the engine: merged follow-ups, secrets, sources, services facts."""

from __future__ import annotations

import json
from pathlib import Path

from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.drivers import all_drivers
from reconciler.engine.context import Context
from reconciler.engine.gather import build_request, parse_node_facts
from reconciler.engine.ops import WriteFile
from reconciler.engine.planner import make_plan
from reconciler.engine.remote_write import write_request
from reconciler.facts.models import FileFact, ServiceFact
from reconciler.facts.services import ENABLED
from reconciler.model import ManagedFile
from reconciler.transport.base import CommandResult
from tests.drivers.base_state import write_state
from tests.drivers.operations.test_operations import EXAMPLE, converged_facts


def _example(tmp_path: Path, extra: str) -> Context:
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE, root)
    (root / "files.yaml").write_text(extra)
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = converged_facts(ctx)
    return ctx


def test_file_restart_and_slurm_conf_restart_are_one_step(tmp_path: Path) -> None:
    ctx = _example(tmp_path, "files:\n  - {path: /etc/slurm/plugstack.conf.d/pyxis.conf, nodes: \"dgx[01-02]\", "
                             "content: \"optional x.so\\n\", notify: [\"restart slurmd rolling\"]}\n")
    for name in ("dgx01", "dgx02"):
        ctx.facts.nodes[name].files["/etc/slurm/plugstack.conf.d/pyxis.conf"] = FileFact(exists=False)
    ctx.state.cluster.slurm_conf.SlurmdPort = 6999  # restarts slurmd everywhere (slurm_config's own follow-up)
    plan = make_plan(ctx, all_drivers())
    slurmd = [f for f in plan.followups if f.target == "slurmd"]
    assert sorted(f.node for f in slurmd) == ["dgx01", "dgx02", "dgx03", "dgx04"]
    both = next(f for f in slurmd if f.node == "dgx01")
    assert both.rolling and both.drain is not None and both.phase == 30
    assert "/etc/slurm/plugstack.conf.d/pyxis.conf changed on dgx01" in both.reasons and len(both.reasons) == 2


def test_reconfigure_from_a_file_merges_with_slurm_conf_reconfigure(tmp_path: Path) -> None:
    ctx = _example(tmp_path, "files:\n  - {path: /etc/slurm/topology.conf, nodes: \"dgx[01-04]\", "
                             "content: \"SwitchName=s0\\n\", notify: [\"scontrol reconfigure\"]}\n")
    path = "/etc/slurm/slurm.conf"
    edited = ctx.facts.nodes["dgx03"].files[path].content.replace("MaxTime=01:00:00", "MaxTime=09:00:00")
    ctx.facts.nodes["dgx03"].files[path] = FileFact(exists=True, content=edited, mode="0644", owner="root",
                                                    group="root", sha256="x")
    plan = make_plan(ctx, all_drivers())
    assert [(f.node, f.kind, f.target) for f in plan.followups] == [("login01", "command", "scontrol reconfigure")]
    assert len(plan.followups[0].reasons) == 5  # slurm.conf changed, and the file on each of four nodes


def test_converged_example_with_files_and_services_plans_nothing(tmp_path: Path) -> None:
    ctx = _example(tmp_path, "files:\n  - {path: /etc/nccl.conf, roles: [compute], content: \"A=1\\n\"}\n"
                             "services:\n  - {name: munge, roles: [compute]}\n")
    for name, node in ctx.facts.nodes.items():
        if name.startswith("dgx"):
            node.files["/etc/nccl.conf"] = FileFact(exists=True, content="A=1\n", mode="0644", owner="root",
                                                    group="root", sha256="x")
    assert not make_plan(ctx, all_drivers()).has_changes


def test_secret_content_is_gathered_as_a_hash_and_sent_only_to_the_writer(tmp_path: Path) -> None:
    root = write_state(tmp_path / "repo", "files:\n  - {path: /etc/munge/munge.key, nodes: gpu01, "
                                          "content: SECRET-KEY-123, secret: true, mode: '0400'}\n")
    ctx = Context(loaded=load_dir(root), source="test")
    request = build_request(ctx, "gpu01", all_drivers())
    assert "/etc/munge/munge.key" in request.files and request.secret == ["/etc/munge/munge.key"]
    write = WriteFile(path="/etc/munge/munge.key", content="SECRET-KEY-123", secret=True)
    assert "SECRET-KEY-123" not in write.model_dump_json() + repr(write) + str(write.model_dump())
    assert json.loads(write_request([write]))[0]["content"] == "SECRET-KEY-123"


def test_services_asked_by_drivers_are_parsed_with_enabled(tmp_path: Path) -> None:
    root = write_state(tmp_path / "repo", "services:\n  - {name: chronyd, nodes: ctl, enabled: true}\n")
    ctx = Context(loaded=load_dir(root), source="test")
    request = build_request(ctx, "ctl", all_drivers())
    assert request.services[-1] == "chronyd" and ENABLED in request.commands
    assert "systemctl is-active munge slurmctld chronyd" in request.commands["services"]
    out = {"hostname": "ctl", "files": {}, "stats": {}, "commands": {
        "services": {"rc": 0, "stdout": "active\nactive\ninactive\n", "stderr": ""},
        ENABLED: {"rc": 0, "stdout": "chronyd disabled\n", "stderr": ""}}}
    facts, _ = parse_node_facts(ctx, "ctl", CommandResult(node="ctl", exit_code=0, stdout=json.dumps(out), stderr="", duration=0.1),
                                request.services)
    assert facts.services["chronyd"] == ServiceFact(name="chronyd", running=False, detail="inactive",
                                                    enabled="disabled")


def test_source_symlink_out_of_the_repo_is_refused(tmp_path: Path) -> None:
    root = write_state(tmp_path / "repo", "files:\n  - {path: /etc/a, nodes: gpu01, source: link.conf}\n")
    (tmp_path / "outside.conf").write_text("x\n")
    (root / "link.conf").symlink_to(tmp_path / "outside.conf")
    try:
        load_dir(root)
    except DesiredStateError as exc:
        assert "files.yaml:2:" in str(exc) and "outside the desired-state repository" in str(exc)
    else:
        raise AssertionError("a source outside the repository loaded")


def test_source_in_a_subdirectory_is_relative_to_its_yaml_file(tmp_path: Path) -> None:
    root = write_state(tmp_path / "repo", "", {"site/nccl.yaml": "files:\n  - {path: /etc/nccl.conf, nodes: gpu01, "
                                                                 "source: conf/nccl.conf}\n",
                                               "site/conf/nccl.conf": "NCCL_DEBUG=INFO\n"})
    (root / "files.yaml").write_text("files:\n  - {path: /etc/x, nodes: ctl, content: \"x\\n\"}\n")
    state = load_dir(root).state
    item: ManagedFile = state.files[1]
    assert item.path == "/etc/nccl.conf" and item.text() == "NCCL_DEBUG=INFO\n"


def _write_locally(ops: list[WriteFile]) -> list[dict]:
    import subprocess

    from reconciler.engine.remote_write import WRITE_COMMAND

    proc = subprocess.run(["sh", "-c", WRITE_COMMAND], input=write_request(ops), capture_output=True, text=True,
                          check=True, timeout=60)
    return json.loads(proc.stdout)


def test_secret_write_keeps_no_backup_and_a_plain_one_does(tmp_path: Path) -> None:
    key, conf = tmp_path / "munge.key", tmp_path / "nccl.conf"
    key.write_text("OLD-KEY")
    (tmp_path / "munge.key.reconciler-bak").write_text("OLDER-KEY")
    conf.write_text("old\n")
    results = _write_locally([WriteFile(path=str(key), content="NEW-KEY", mode="0400", secret=True, backup=False),
                              WriteFile(path=str(conf), content="new\n", mode="0644")])
    assert results == [{"ok": True}, {"ok": True}]
    assert key.read_text() == "NEW-KEY" and oct(key.stat().st_mode & 0o777) == "0o400"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["munge.key", "nccl.conf", "nccl.conf.reconciler-bak"]


def test_rejected_write_still_restores_the_old_file_without_backup(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old\n")
    target.chmod(0o600)
    results = _write_locally([WriteFile(path=str(target), content="new\n", after="false", backup=False)])
    assert not results[0]["ok"] and target.read_text() == "old\n" and oct(target.stat().st_mode & 0o777) == "0o600"
