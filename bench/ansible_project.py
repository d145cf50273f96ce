"""The Ansible side of the comparison: inventory and variables from our desired state, runs, counts.

`write_project` turns a desired-state directory into an Ansible project for `bench/ansible/playbook.yml`:
`inventory.yml` (every node, with the variables its templates need, translated from the files our renderer
writes, so both tools hold the same data), `ansible.cfg` (the testbed's ssh_config, Ansible's default
ControlPersist, no pipelining: Ansible's defaults) and two tiny wrappers around `ssh` and `sftp` that log
each invocation, so `count_round_trips` can tell how many SSH sessions Ansible opened per node.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BENCH, Timed, python_env, timed_run
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.desired.source import describe_source
from reconciler.model import DesiredState
from reconciler.render import managed_files_for, render_file
from reconciler.render.blocks import block_body
from reconciler.render.files import file_path

PLAYBOOK = BENCH / "ansible" / "playbook.yml"
TOKEN = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)')
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
WRAPPER = """#!/bin/sh
# Logs one line per {tool} invocation for the benchmark's round-trip count, then runs the real {tool}.
printf '%s\\n' "{tool} $*" >> {log}
exec {real} "$@"
"""


def ansible_playbook() -> str | None:
    """The ansible-playbook next to this interpreter, else on PATH, or None."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    return str(beside) if beside.exists() else shutil.which("ansible-playbook")


def _pairs(line: str) -> dict[str, str]:
    """`Key=Value Key2="a b"` -> ordered dict of the raw (still quoted) values."""
    return {key: value for key, value in TOKEN.findall(line)}


def slurm_conf_vars(text: str) -> dict[str, Any]:
    """Template variables of slurm.conf from its rendered text: globals, node sets, partitions."""
    params: list[list[str]] = []
    node_sets: list[dict[str, str]] = []
    partitions: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("NodeName="):
            node_sets.append(_pairs(line))
        elif line.startswith("PartitionName="):
            partitions.append(_pairs(line))
        else:
            key, _, value = line.partition("=")
            params.append([key, value])
    return {"slurm_conf_params": params, "slurm_node_sets": node_sets, "slurm_partitions": partitions}


def _body(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


# Variables a host uses only for a file in its `managed_files`: shared on the group when equal.
GATED = {"slurm.conf": ("slurm_conf_params", "slurm_node_sets", "slurm_partitions"),
         "gres.conf": ("gres_conf_lines",), "cgroup.conf": ("cgroup_conf_params",),
         "exports": ("exports_lines",), "fstab": ("fstab_lines",)}


def host_vars(state: DesiredState, node: str, source: str) -> dict[str, Any]:
    """What the playbook needs for one node, all from what our renderer writes there."""
    files = managed_files_for(state, node)
    out: dict[str, Any] = {"managed_files": files}
    if "slurm.conf" in files:
        out.update(slurm_conf_vars(render_file(state, node, "slurm.conf", source)))
    if "gres.conf" in files:
        out["gres_conf_lines"] = [_pairs(line) for line in _body(render_file(state, node, "gres.conf", source))]
    if "cgroup.conf" in files:
        out["cgroup_conf_params"] = [line.split("=", 1)
                                     for line in _body(render_file(state, node, "cgroup.conf", source))]
    for name, key in (("exports", "exports_lines"), ("fstab", "fstab_lines")):
        if name in files:
            out[key] = block_body(render_file(state, node, name, source)) or []
    images = [{"path": i.path, "uri": i.uri} for i in state.images if i.import_on == node]
    if images:
        out["enroot_images"] = images
    return out


def inventory(desired: Path) -> dict[str, Any]:
    """The inventory of a desired state: group `slurm` with every node; equal file variables on the group.

    A host renders a file only when it is in its `managed_files`, so a group variable reaches only the
    hosts that manage that file; host variables hold what differs (and the enroot images to stat).
    """
    loaded = load_dir(desired)
    state = loaded.state
    source = describe_source(loaded.root, loaded.commit)
    per_host = {name: host_vars(state, name, source) for name in node_specs(state)}
    shared: dict[str, Any] = {
        "reconciler_source": source,
        "slurm_config_dir": str(Path(file_path(state, "slurm.conf")).parent),
        "slurm_controller": state.cluster.controllers[0],
        "exports_path": "/etc/exports",
        "fstab_path": "/etc/fstab",
    }
    for key in ["managed_files", *(k for keys in GATED.values() for k in keys)]:
        values = [v[key] for v in per_host.values() if key in v]
        if values and all(value == values[0] for value in values) \
                and (key != "managed_files" or len(values) == len(per_host)):
            shared[key] = values[0]
            for v in per_host.values():
                v.pop(key, None)
    return {"all": {"children": {"slurm": {"vars": shared,
                                           "hosts": {name: (v or None) for name, v in per_host.items()}}}}}


@dataclass
class AnsibleProject:
    """A directory with inventory.yml, ansible.cfg and the counting ssh/sftp wrappers."""

    root: Path
    ssh_config: Path
    hosts: list[str]
    forks: int
    pipelining: bool = False
    gathering: str | None = None  # Ansible's `gathering` (implicit by default; `explicit`: only when asked)
    persist: str = "60s"  # ControlPersist
    inventory_data: dict[str, Any] = field(default_factory=dict)

    @property
    def ssh_log(self) -> Path:
        """One line per ssh/sftp invocation."""
        return self.root / "ssh-invocations.log"

    @property
    def control_dir(self) -> Path:
        """Where Ansible's ControlPersist sockets live (ours, so that we can close them after a run)."""
        return self.root / "cp"

    def write(self, desired: Path) -> None:
        """Write inventory, config and wrappers for a desired state."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.control_dir.mkdir(exist_ok=True)
        self.inventory_data = inventory(desired)
        self.write_inventory()
        for tool in ("ssh", "sftp", "scp"):
            wrapper = self.root / f"counting-{tool}"
            real = shutil.which(tool) or f"/usr/bin/{tool}"
            wrapper.write_text(WRAPPER.format(tool=tool, log=self.ssh_log, real=real))
            wrapper.chmod(0o755)
        ssh_args = f"-C -o ControlMaster=auto -o ControlPersist={self.persist} -F {self.ssh_config}"
        (self.root / "ansible.cfg").write_text(
            "[defaults]\n"
            f"inventory = {self.root / 'inventory.yml'}\n"
            f"forks = {self.forks}\n"
            "interpreter_python = /usr/bin/python3\n"
            "host_key_checking = True\n"
            "retry_files_enabled = False\n"
            + (f"gathering = {self.gathering}\n" if self.gathering else "")
            + "[ssh_connection]\n"
            f"ssh_args = {ssh_args}\n"
            f"control_path_dir = {self.control_dir}\n"
            f"pipelining = {self.pipelining}\n"
            f"ssh_executable = {self.root / 'counting-ssh'}\n"
            f"sftp_executable = {self.root / 'counting-sftp'}\n"
            f"scp_executable = {self.root / 'counting-scp'}\n"
        )

    def write_inventory(self) -> None:
        """(Re)write inventory.yml from `inventory_data`."""
        # JSON is YAML that keeps key order and quotes every string (YAML 1.1 would read `no` as false)
        (self.root / "inventory.yml").write_text(json.dumps(self.inventory_data, indent=1) + "\n")

    def set_partition(self, partition: str, key: str, value: str) -> None:
        """Change one key of one partition in the inventory (the one-line change on Ansible's side)."""
        shared = self.inventory_data["all"]["children"]["slurm"]["vars"]
        for part in shared["slurm_partitions"]:
            if part["PartitionName"] == partition:
                part[key] = value
        self.write_inventory()

    def env(self) -> dict[str, str]:
        """The environment for ansible-playbook: our config, no colour, no cowsay."""
        return python_env({"ANSIBLE_CONFIG": str(self.root / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                           "ANSIBLE_NOCOWS": "1", "ANSIBLE_FORCE_COLOR": "0"})

    def run(self, *args: str, timeout: float = 1800.0, cold: bool = True) -> Timed:
        """Run the playbook (extra args such as --check --diff); COLD: control sockets closed first (else reused)."""
        binary = ansible_playbook()
        if binary is None:
            raise RuntimeError("ansible-playbook not found: pip install '.[bench]'")
        if cold:
            self.close_masters()
        self.ssh_log.write_text("")
        return timed_run([binary, str(PLAYBOOK), *args], env=self.env(), cwd=self.root, timeout=timeout)

    def close_masters(self) -> None:
        """Stop the ControlPersist masters of the last run, so every run starts without connections."""
        if not any(self.control_dir.iterdir()):
            return

        def stop(host: str) -> None:
            subprocess.run(["ssh", "-F", str(self.ssh_config), "-o", f"ControlPath={self.control_dir}/%C",
                            "-O", "exit", host], capture_output=True, timeout=30, check=False)

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(stop, self.hosts))

    def count_round_trips(self) -> dict[str, int]:
        """SSH sessions per node of the last run: ssh command executions and sftp/scp transfers."""
        counts = dict.fromkeys(self.hosts, 0)
        for line in self.ssh_log.read_text().splitlines():
            words = line.split()
            if "-O" in words:
                continue  # ControlMaster housekeeping, not a session
            host = next((w.strip("[]'\"") for w in words[1:] if w.strip("[]'\"") in counts), None)
            if host is not None:
                counts[host] += 1
        return counts


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP per host: ok, changed, unreachable, failed."""
    return {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
            for m in RECAP.findall(output)}
