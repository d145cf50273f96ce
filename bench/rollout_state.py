"""The desired state of the rollout section: the engine tests' testbed state (tests/engine/testbed_state.py,
copied: the bench does not import tests/) plus `Prolog=/etc/slurm/prolog.sh`, and the rollout variants measured.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

CLUSTER = """\
cluster:
  name: {name}
  slurm_version: "22.05"
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


PROLOG = "/etc/slurm/prolog.sh"
GOOD_PROLOG = "#!/bin/sh\nexit 0\n"
MANAGED = "/etc/bench-rollout.conf"
GATE_TIMEOUT = "90s"
DEFAULT_SOAK_S = 30  # reconciler.model.Rollout's default soak
ROLLOUT_ALL = "rollout:\n  waves: all\n"
# The tests' progressive rollout (canary 1, then 50%, then 100%) with the soak at 0 s, so that the figure is the
# gates' cost; the stand-in NCCL gate off (the default, said here), no node checks declared: the smoke job gates.
ROLLOUT_PROGRESSIVE = f"""\
rollout:
  waves: progressive
  canary: 1
  steps: ["50%", "100%"]
  soak: 0s
  gates:
    timeout: {GATE_TIMEOUT}
    smoke_job: true
    nccl: false
"""

Edit = Callable[[str], str]


def write_state(directory: Path, *, name: str, state_dir: Path, subnet: str, computes: str,
                memory: int = 1000) -> Path:
    """Write the desired state (Prolog set, progressive rollout) for a bare testbed; return the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    values = {"name": name, "state_dir": state_dir, "subnet": subnet, "computes": computes, "memory": memory}
    cluster = CLUSTER.format(**values).replace("    SlurmdParameters: config_overrides\n",
                                               "    SlurmdParameters: config_overrides\n"
                                               f"    Prolog: {PROLOG}\n")
    (directory / "cluster.yaml").write_text(cluster)
    (directory / "nodes.yaml").write_text(INVENTORY.format(**values))
    (directory / "storage.yaml").write_text(STORAGE.format(**values))
    (directory / "patches.yaml").write_text(PATCHES.format(**values))
    (directory / "rollout.yaml").write_text(ROLLOUT_PROGRESSIVE)
    return directory


def prolog_patch(content: str) -> Edit:
    """An edit of patches.yaml replacing the prolog patch's content."""
    def edit(text: str) -> str:
        head, _, _ = text.partition("    content: |\n")
        return head + "    content: |\n" + "".join(f"      {line}\n" for line in content.splitlines())
    return edit


def files_yaml(content: str, computes: str) -> Edit:
    """files.yaml: one managed file on every compute node (COMPUTES, a hostlist)."""
    body = "".join(f"      {line}\n" for line in content.splitlines())
    return lambda _: f"files:\n  - path: {MANAGED}\n    nodes: {computes}\n    content: |\n{body}"


def replace(text: str) -> Edit:
    """An edit that replaces a file's whole text."""
    return lambda _: text
