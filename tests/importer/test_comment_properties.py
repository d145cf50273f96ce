"""Property test (Hypothesis): comments anywhere in slurm.conf never crash the import's YAML writer.

Commented-out lines (keys included), comments at the ends of global, NodeName and PartitionName lines, runs of
comments before and between records, and comments on continuation lines: the import either writes YAML that
loads back and validates, or refuses with an ImportProblem or a file:line syntax error. Never a traceback,
never a file written half.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from reconciler.desired.loader import load_dir
from reconciler.facts.slurmconf import ConfSyntaxError
from reconciler.importer import ImportProblem, import_files
from reconciler.importer.sources import LocalFiles

BASE = [
    "ClusterName=prop",
    "SlurmctldHost=ctl",
    "AuthType=auth/munge",
    "ReturnToService=2",
    "NodeName=DEFAULT CPUs=4 RealMemory=1000",
    "NodeName=n[1-4] CPUs=8 \\",
    "  State=UNKNOWN",
    "PartitionName=DEFAULT MaxTime=60",
    "PartitionName=batch Nodes=n[1-4] Default=YES State=UP",
    "PartitionName=debug Nodes=n[1-2]",
]
# Comment text: printable, with what YAML treats specially (':', '#', quotes, braces, '- ') and non-ASCII.
COMMENT = st.text(st.sampled_from(list("abc XYZ019=:#'\"{}[]-&*!|>%@`,é中\t")), max_size=40)
COMMENTED_OUT = st.sampled_from(BASE).map(lambda line: "#" + line.rstrip("\\ "))


@st.composite
def commented_conf(draw: st.DrawFn) -> str:
    """BASE with comment lines inserted anywhere and comments at the ends of lines."""
    out: list[str] = []
    for line in BASE:
        for extra in draw(st.lists(st.one_of(COMMENT.map(lambda c: "#" + c), COMMENTED_OUT), max_size=2)):
            out.append(extra)
        if not line.endswith("\\") and draw(st.booleans()):
            line = f"{line} #{draw(COMMENT)}"
        out.append(line)
    return "\n".join(out) + "\n"


@given(commented_conf())
def test_comments_anywhere_import_cleanly(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "src", Path(tmp) / "out"
        source.mkdir()
        (source / "slurm.conf").write_text(text, encoding="utf-8")
        try:
            import_files(LocalFiles(source, "/etc/slurm"), out, "23.11", str(source))
        except (ImportProblem, ConfSyntaxError) as exc:
            assert str(exc).startswith(str(source)) or ":" in str(exc), exc
            return
        loaded = load_dir(out)  # raises (a failing example) when the YAML does not load or validate
        assert loaded.state.cluster.name == "prop"
        assert {p.name for p in loaded.state.cluster.partitions} == {"batch", "debug"}
