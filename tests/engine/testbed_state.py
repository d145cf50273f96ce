"""A desired state for a bare testbed, written by the engine tests (and reused by the daemon tests)."""

from __future__ import annotations

from pathlib import Path

CLUSTER = """\
cluster:
  name: {name}
  slurm_version: "{slurm}"
  controllers: [ctl]
  slurm_conf:
    SlurmctldPort: 6817
    SlurmdPort: 6818
    AuthType: auth/munge
    SlurmUser: slurm
    StateSaveLocation: /var/lib/slurm/slurmctld
    SlurmdSpoolDir: /var/lib/slurm/slurmd
    SlurmctldPidFile: /run/slurmctld.pid
    SlurmdPidFile: /run/slurmd.pid
    SlurmctldLogFile: /var/log/slurm/slurmctld.log
    SlurmdLogFile: /var/log/slurm/slurmd.log
    MpiDefault: none
    ProctrackType: proctrack/linuxproc
    TaskPlugin: task/none
    SelectType: select/cons_tres
    SelectTypeParameters: CR_Core
    SchedulerType: sched/backfill
    GresTypes: gpu
    ReturnToService: 2
    SlurmdTimeout: 30
    JobAcctGatherType: jobacct_gather/none
    SlurmdParameters: config_overrides
  node_sets:
    - nodes: {computes}
      CPUs: 2
      RealMemory: {memory}
      gpus: {{count: 8}}
      State: UNKNOWN
  partitions:
    - name: debug
      nodes: {computes}
      default: true
      MaxTime: "01:00:00"
      State: UP
    - name: batch
      nodes: {computes}
      MaxTime: "04:00:00"
      State: UP
  gres:
    lines:
      - {{nodes: "{computes}", name: gpu, file: "/dev/nvidia[0-7]"}}
"""

INVENTORY = """\
ssh:
  config: {state_dir}/ssh_config
  known_hosts: {state_dir}/known_hosts
  connect_timeout: 5
  service_manager: {{type: supervisord}}
nodes:
  - name: ctl
    roles: [controller, login, nfs-server]
  - name: {computes}
    roles: [compute]
"""

STORAGE = """\
storage:
  exports:
    - server: ctl
      path: /srv/shared
      clients: ["{subnet}.0/24"]
      options: [rw, sync, no_subtree_check, no_root_squash]
  mounts:
    - source: ctl:/srv/shared
      mountpoint: /shared
      nodes: {computes}
images:
  - uri: docker://nvcr.io#nvidia/pytorch:24.04-py3
    path: /srv/shared/images/pytorch-24.04.sqsh
    import_on: ctl
"""

PATCHES = """\
patches:
  - name: prolog
    path: /etc/slurm/prolog.sh
    nodes: {computes}
    mode: "0755"
    content: |
      #!/bin/sh
      exit 0
"""


# The engine and daemon tests measure one-shot applies; tests/rollout writes its own waves over this file.
ROLLOUT_ALL = "rollout:\n  waves: all\n"


def write_state(directory: Path, *, name: str, state_dir: Path, subnet: str, computes: str,
                memory: int = 1000, extra_patches: str = "", slurm: str = "22.05") -> Path:
    """Write the YAML files of the test desired state (rolled out all at once, declaring Slurm release SLURM, the
    testbed's `.slurm`); return the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    values = {"name": name, "state_dir": state_dir, "subnet": subnet, "computes": computes, "memory": memory,
              "slurm": slurm}
    (directory / "cluster.yaml").write_text(CLUSTER.format(**values))
    (directory / "nodes.yaml").write_text(INVENTORY.format(**values))
    (directory / "storage.yaml").write_text(STORAGE.format(**values))
    (directory / "patches.yaml").write_text(PATCHES.format(**values) + extra_patches)
    (directory / "rollout.yaml").write_text(ROLLOUT_ALL)
    return directory
