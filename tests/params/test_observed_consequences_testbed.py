"""What each kind of Slurm configuration change needs, measured on real daemons of each testbed release, next to
what the project claims (drivers/slurm_consequences.py, the parameter tables, the importer's file rules).

The comparison rule is consequence_probe's docstring (and the table's legend): a claim must be sufficient and
job-safe, and no cheaper route may be. Writes the table as markdown to the test's tmp dir and, with
RECONCILER_WRITE_OBSERVED=PATH, to PATH (docs/slurm-parameters.md's "Observed on the testbed" table comes from there); fails naming
every disagreement.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.params.consequence_cases import CASES
from tests.params.consequence_probe import Prober, Row, claimed, disagreements, markdown, measure
from tests.params.probe_io import read_files, sh
from tests.testbed_fixture import ALL_RELEASES, Testbed

ROWS: list[Row] = []  # every release's rows, for the combined table


@pytest.fixture(scope="module", params=ALL_RELEASES)  # 26.05 too: issue 44 item 5
def bed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A 2-node testbed of one release, shared by the cases."""
    return testbed_factory(nodes=2, slurm=request.param)


def test_observed_consequences_agree_with_the_claims(bed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> None:
    began = time.monotonic()
    baseline = read_files(bed)
    prober = Prober(bed, baseline)
    rows = []
    try:
        for case in CASES:
            start = case.before(dict(prober.files)) if case.before else dict(prober.files)
            claim = claimed(start, case.edit(dict(start)), bed.slurm, bed.computes)
            rows.append(Row(case.name, bed.slurm, claim, measure(prober, case, start, claim)))
    finally:
        sh(bed, "ctl", "scancel --full $(squeue -h -o %i) 2>/dev/null; true")
        prober.reset(baseline, list(bed.computes))
    ROWS.extend(rows)
    table = markdown(ROWS)
    (tmp_path_factory.getbasetemp() / "observed_consequences.md").write_text(table)
    if target := os.environ.get("RECONCILER_WRITE_OBSERVED"):
        Path(target).write_text(table)
    print(f"\n{bed.slurm}: {time.monotonic() - began:.0f} s, {prober.resets} resets\n{table}")
    wrong = disagreements(rows)
    assert not wrong, "the daemons disagree with the project's claims:\n" + "\n".join(wrong) + "\n\n" + table
