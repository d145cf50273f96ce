"""Render cgroup.conf."""

from __future__ import annotations

from reconciler.model import CgroupConf
from reconciler.render.common import header, yes_no


def render_cgroup_conf(cgroup: CgroupConf, source: str) -> str:
    """Render cgroup.conf: parameters in the order written, then extra keys sorted."""
    pairs = cgroup.items()
    lines = [header("cgroup.conf", source)]
    lines += [f"{key}={yes_no(value)}" for key, value in pairs if value is not None]
    return "\n".join(lines) + "\n"
