"""The desired-state directory `testbed up` writes: the running testbed, in the project's YAML format.

The Slurm part matches the minimal cluster `up` starts (so adopting it is close to a no-op) and adds what
the reconciler should bring (with ``up --accounting``, slurm.conf's accounting parameters too: see
ACCOUNTING_SLURM_CONF): a second partition, a prolog (a managed file) and the rxdm patch, an NFS
export from ctl mounted as /shared, an enroot image, and node checks. A light testbed (sshd only, no Slurm
daemons) gets LIGHT_FILES: the same Slurm files (written, never served: no daemon reads them) and one managed
file on every node, nothing that needs munge, NFS or enroot. Standard library only (the YAML is written from
templates); `reconciler validate DIR` checks it against the schema (reconciler/model/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

SCHEMA = Path(__file__).resolve().parents[1] / "desired-state.schema.json"
IMAGE_URI = "docker://nvcr.io#nvidia/pytorch:24.04-py3"
IMAGE_PATH = "/shared/images/pytorch-24.04.sqsh"
PROLOG = "/etc/slurm/prolog.sh"
RXDM = "/opt/apps/adm/slurm/scripts/rxdm"
LIGHT_FILE = "/etc/reconciler-testbed/light.conf"  # the light desired state's managed file on every node
RXDM_DEBIAN = 'if (grep -q "ID=debian" /etc/os-release && lsb_release -rs | grep -q "12"); then'
RXDM_UBUNTU = 'if (grep -q "ID=ubuntu" /etc/os-release && lsb_release -rs | grep -q "22.04"); then'

# The rxdm hook of Cluster Toolkit images, as the testbed seeds it on compute nodes (see tb_prepare.py):
# the desired state's rxdm patch edits its OS test, as on a real A3-Mega cluster.
RXDM_SCRIPT = f"""#!/bin/bash
# Testbed copy of the Cluster Toolkit rxdm prolog hook: only its OS test matters (patched by the reconciler).
{RXDM_DEBIAN}
    echo "rxdm: supported OS"
fi
exit 0
"""

# slurm.conf parameters of the running testbed (tb_services.slurm_conf writes them from here too).
SLURM_CONF: dict[str, str | int] = {  # in the order reconciler's renderer writes them
    "SlurmctldPort": 6817,
    "SlurmdPort": 6818,
    "AuthType": "auth/munge",
    "CredType": "cred/munge",
    "SlurmUser": "slurm",
    "StateSaveLocation": "/var/lib/slurm/slurmctld",
    "SlurmdSpoolDir": "/var/lib/slurm/slurmd",
    "SlurmctldPidFile": "/run/slurmctld.pid",
    "SlurmdPidFile": "/run/slurmd.pid",
    "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
    "SlurmdLogFile": "/var/log/slurm/slurmd.log",
    "MpiDefault": "none",
    "ProctrackType": "proctrack/linuxproc",
    "TaskPlugin": "task/none",
    "SelectType": "select/cons_tres",
    "SelectTypeParameters": "CR_Core",
    "SchedulerType": "sched/backfill",
    "GresTypes": "gpu",
    "ReturnToService": 2,
    "RebootProgram": "/usr/lib/reconciler-testbed/reboot",  # asks the testbed's keeper (deploy/testbed/reboot.py)
    "JobAcctGatherType": "jobacct_gather/none",
    "AccountingStorageType": "accounting_storage/none",
    "SlurmdParameters": "config_overrides",
}

# With `up --accounting` (slurmdbd and MariaDB on ctl): these replace or follow SLURM_CONF's keys, same order.
ACCOUNTING_SLURM_CONF: dict[str, str | int] = {
    "JobAcctGatherType": "jobacct_gather/linux",
    "AccountingStorageType": "accounting_storage/slurmdbd",
    "AccountingStorageHost": "ctl",
    "AccountingStorageEnforce": "associations,limits,qos",
    "AccountingStorageTRES": "gres/gpu",
}


def slurm_conf_params(accounting: bool = False) -> dict[str, str | int]:
    """The testbed's slurm.conf parameters in the renderer's order; ACCOUNTING: with slurmdbd on ctl."""
    if not accounting:
        return dict(SLURM_CONF)
    params: dict[str, str | int] = {}
    for key, value in SLURM_CONF.items():
        params[key] = ACCOUNTING_SLURM_CONF.get(key, value)
        if key == "AccountingStorageType":  # the new keys follow the storage type
            params.update((k, v) for k, v in ACCOUNTING_SLURM_CONF.items() if k not in SLURM_CONF)
    return params


class LayoutLike(Protocol):
    """What the generator needs from tb_layout.Layout."""

    name: str
    subnet: str
    configless: bool

    @property
    def compute_nodes(self) -> list[str]: ...

    @property
    def desired_state(self) -> Path: ...

    @property
    def ssh_config(self) -> Path: ...

    @property
    def known_hosts(self) -> Path: ...

    @property
    def identity(self) -> Path: ...


def q(value: Any) -> str:
    """A YAML scalar: JSON quoting is valid YAML and never ambiguous."""
    return json.dumps(value)


def header(what: str) -> str:
    """First lines of every file: schema reference and what the file holds."""
    schema = f"# yaml-language-server: $schema={SCHEMA}\n" if SCHEMA.exists() else ""
    return f"{schema}# Written by deploy/testbed for this testbed: {what}\n"


def spec(layout: LayoutLike, cpus: int, memory_mb: int, gpus: int) -> dict[str, Any]:
    """The plain data the YAML templates are filled from."""
    computes = layout.compute_nodes
    hostlist = computes[0] if len(computes) == 1 else f"gpu[{computes[0][3:]}-{computes[-1][3:]}]"
    return {"name": layout.name, "subnet": getattr(layout, "cidr", f"{layout.subnet}.0/24"), "computes": hostlist,
            "all": f"ctl,{hostlist}", "cpus": cpus, "memory": memory_mb, "gpus": gpus,
            "ssh_config": str(layout.ssh_config), "known_hosts": str(layout.known_hosts),
            "identity": str(layout.identity), "configless": getattr(layout, "configless", False),
            "light": getattr(layout, "light", False), "accounting": getattr(layout, "accounting", False),
            "slurm": getattr(layout, "slurm", "") or "22.05"}


def cluster_yaml(s: dict[str, Any]) -> str:
    """cluster.yaml: the running slurm.conf, a second partition, gres.conf and the prolog."""
    params = "".join(f"    {k}: {q(v)}\n" for k, v in slurm_conf_params(bool(s.get("accounting"))).items())
    # configless: slurm.conf on ctl only (the reconciler adds SlurmctldParameters=enable_configless), slurmd on
    # the compute nodes started with --conf-server ctl:6817 by a supervisord program the reconciler writes.
    mode = "  mode: configless\n" if s.get("configless") else ""
    return header("the Slurm cluster (slurm.conf, gres.conf)") + f"""cluster:
  name: {q(s["name"])}
  slurm_version: "{s.get("slurm", "22.05")}"
  controllers: [ctl]
{mode}  slurm_conf:
{params}  node_sets:
    - nodes: {q(s["computes"])}
      CPUs: {s["cpus"]}
      RealMemory: {s["memory"]}
      gpus: {{count: {s["gpus"]}}}
      State: UNKNOWN
  partitions:
    - name: debug
      nodes: {q(s["computes"])}
      default: true
      MaxTime: INFINITE
      State: UP
    - name: batch
      nodes: {q(s["computes"])}
      MaxTime: "1-00:00:00"
      State: UP
  gres:
    lines:
      - {{nodes: {q(s["computes"])}, name: gpu, file: "/dev/nvidia[0-{s["gpus"] - 1}]"}}
  prolog: {PROLOG}
"""


# Light nodes run sshd only. This STAND-IN service manager reports every service running and does nothing, so
# that the light desired state's Slurm files are compared (and written) without daemons to start or restart.
LIGHT_SERVICE_MANAGER = '{type: custom, start: "true", stop: "true", restart: "true", status: "true"}'


def nodes_yaml(s: dict[str, Any]) -> str:
    """nodes.yaml: every node reached through the testbed's ssh_config and known_hosts."""
    manager = LIGHT_SERVICE_MANAGER if s.get("light") else "{type: supervisord}"
    return header("inventory, reached through the testbed's ssh_config") + f"""ssh:
  config: {q(s["ssh_config"])}
  known_hosts: {q(s["known_hosts"])}
  identity_file: {q(s["identity"])}
  host_key_policy: reject
  user: root
  connect_timeout: 10
  service_manager: {manager}
nodes:
  - name: ctl
    roles: [controller, login, nfs-server]
  - name: {q(s["computes"])}
    roles: [compute]
"""


def storage_yaml(s: dict[str, Any]) -> str:
    """storage.yaml: /srv/shared exported by ctl, mounted as /shared everywhere."""
    return header("NFS export from ctl, mounted on every node") + f"""storage:
  exports:
    - server: ctl
      path: /srv/shared
      clients: [{q(s["subnet"])}]
      options: [rw, sync, no_subtree_check, no_root_squash]
  mounts:
    - source: ctl:/srv/shared
      mountpoint: /shared
      type: nfs
      options: [defaults, _netdev]
      nodes: {q(s["all"])}
"""


def images_yaml(s: dict[str, Any]) -> str:
    """images.yaml: the pytorch image, imported on ctl onto shared storage."""
    return header("enroot images (the testbed's enroot is a stand-in)") + f"""images:
  - uri: {q(IMAGE_URI)}
    path: {IMAGE_PATH}
    import_on: ctl
"""


def patches_yaml(s: dict[str, Any]) -> str:
    """patches.yaml: the Slurm prolog as a managed file and the rxdm OS-test patch."""
    return header("the prolog (managed file) and the rxdm patch") + f"""patches:
  - name: prolog
    path: {PROLOG}
    nodes: {q(s["computes"])}
    mode: "0755"
    owner: root
    group: root
    content: |
      #!/bin/sh
      # Slurm prolog (managed by the reconciler): run the rxdm hook, never fail the job for it.
      [ -x {RXDM} ] && {RXDM} >/dev/null 2>&1
      exit 0
  - name: rxdm-ubuntu-2204
    path: {RXDM}
    nodes: {q(s["computes"])}
    match: {q(RXDM_DEBIAN)}
    replace: {q(RXDM_UBUNTU)}
"""


def checks_yaml(s: dict[str, Any]) -> str:
    """checks.yaml: node checks the testbed can pass (GPU checks are the tests' business: the GPUs are stand-ins)."""
    return header("node checks") + f"""checks:
  node:
    - name: testbed-basics
      nodes: {q(s["computes"])}
      interval: 10m
      mounts: [/shared]
      services: [munge, slurmd]
      images: true
      slurm_state: [IDLE, MIXED, ALLOCATED, COMPLETING]
    - name: controller
      nodes: ctl
      interval: 10m
      mounts: [/shared]
      services: [munge, slurmctld]
"""


def light_patches_yaml(s: dict[str, Any]) -> str:
    """patches.yaml of a light testbed: one managed file on every node (what a no-op plan compares)."""
    return header("a managed file on every node (light testbed: no Slurm daemons)") + f"""patches:
  - name: light-marker
    path: {LIGHT_FILE}
    nodes: {q(s["all"])}
    mode: "0644"
    owner: root
    group: root
    content: |
      # managed by the reconciler on testbed {s["name"]}
      testbed={s["name"]}
"""


def rollout_yaml(s: dict[str, Any]) -> str:
    """rollout.yaml: one shot (every node at once, no gates), what the testbed's timings measure; progressive
    rollouts (the default elsewhere) are tested with a rollout.yaml of their own, and deploy/demo commits one."""
    return header("how a commit reaches the nodes: all at once on the testbed") + """rollout:
  waves: all
"""


FILES = {"cluster.yaml": cluster_yaml, "nodes.yaml": nodes_yaml, "storage.yaml": storage_yaml,
         "images.yaml": images_yaml, "patches.yaml": patches_yaml, "checks.yaml": checks_yaml,
         "rollout.yaml": rollout_yaml}


LIGHT_FILES = {"cluster.yaml": cluster_yaml, "nodes.yaml": nodes_yaml, "patches.yaml": light_patches_yaml,
               "rollout.yaml": rollout_yaml}


def render(data: dict[str, Any]) -> dict[str, str]:
    """File name -> YAML text, from the plain data of `spec`."""
    files = LIGHT_FILES if data.get("light") else FILES
    return {name: make(data) for name, make in files.items()}


def write(layout: LayoutLike, cpus: int, memory_mb: int, gpus: int) -> Path:
    """Write the desired-state directory of a testbed and return its path."""
    out = layout.desired_state
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render(spec(layout, cpus, memory_mb, gpus)).items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)
    return out
