"""nccl-tests output: parser, verdict and the ``nccl`` command group."""

from checks.nccl.models import NcclDevice, NcclRow, NcclRun, NcclTest
from checks.nccl.parser import collective_from_binary, parse_file, parse_json, parse_output, parse_text

__all__ = [
    "NcclDevice",
    "NcclRow",
    "NcclRun",
    "NcclTest",
    "collective_from_binary",
    "parse_file",
    "parse_json",
    "parse_output",
    "parse_text",
]
