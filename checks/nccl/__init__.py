"""nccl-tests output: parser, verdict and the ``nccl`` command group (``checks.nccl.cli``)."""

from reconciler.checks.nccl.binary import collective_from_binary
from reconciler.checks.nccl.json_output import parse_json
from reconciler.checks.nccl.models import NcclDevice, NcclRow, NcclRun, NcclTest
from reconciler.checks.nccl.parser import parse_file, parse_output
from reconciler.checks.nccl.text_output import parse_text
from reconciler.checks.nccl.verdict import RegressionPolicy, Thresholds, Verdict, check_regression, evaluate

__all__ = [
    "NcclDevice",
    "NcclRow",
    "NcclRun",
    "NcclTest",
    "RegressionPolicy",
    "Thresholds",
    "Verdict",
    "check_regression",
    "collective_from_binary",
    "evaluate",
    "parse_file",
    "parse_json",
    "parse_output",
    "parse_text",
]
