"""Render gres.conf."""

from __future__ import annotations

from reconciler.common import hostlist
from reconciler.model import GresConf
from reconciler.render.common import SlurmValue, header, key_values


def render_gres_conf(gres: GresConf, source: str) -> str:
    """Render gres.conf: AutoDetect first, then explicit lines."""
    lines = [header("gres.conf", source)]
    if gres.auto_detect:
        lines.append(f"AutoDetect={gres.auto_detect}")
    for line in gres.lines:
        nodes = hostlist.compress(hostlist.expand(line.nodes)) if line.nodes else None
        pairs: list[tuple[str, SlurmValue]] = [
            ("NodeName", nodes), ("Name", line.name), ("Type", line.type), ("File", line.file),
            ("Count", line.count), ("Cores", line.cores), ("Links", line.links),
        ]
        pairs += sorted(line.params.items())
        lines.append(key_values(pairs))
    return "\n".join(lines) + "\n"
