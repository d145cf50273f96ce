"""Print the GPU part of the node probe, as `reconciler check` sends it, to run by hand on a GPU host.

    python3 -m bench.gpu_probe_script > probe.sh; time sh probe.sh

The sections are those a check with every GPU item asks for: the query (old and new drivers), device minors,
XIDs, NVLink, InfiniBand ports, and `nvidia-fabricmanager`'s state by systemd. No SSH, no Slurm.
"""

from __future__ import annotations

import sys

from reconciler.checks.node import Probes, probe_command
from reconciler.model import ServiceManager


def gpu_probe_script() -> str:
    """The probe script of a check asking for every GPU item."""
    probes = Probes(gpu=True, xid=True, nvlink=True, ib=True, services=["nvidia-fabricmanager"])
    return probe_command(probes, ServiceManager(type="systemd"))


if __name__ == "__main__":
    sys.stdout.write(gpu_probe_script())
