"""`reconciler ARGS` with the SSH transport's counters written out: `python -m bench.counted_cli FILE ARGS`.

The reconciler's own click `main` runs unchanged; when the transport closes, its per-node `round_trips`
(one per command sent and answered, reconciler/transport/base.py) and `connects` go to FILE as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from reconciler.cli import startup

startup.begin()  # as the console script does, before the imports below

from reconciler.cli.main import main as reconciler_main  # noqa: E402
from reconciler.transport.ssh import SSHTransport  # noqa: E402


def counting(out: Path) -> None:
    """Make every SSHTransport write its counters to `out` when it closes."""
    original = SSHTransport.close

    def close(self: SSHTransport) -> None:
        out.write_text(json.dumps({"round_trips": self.round_trips, "connects": self.connects}))
        original(self)

    SSHTransport.close = close  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    """Install the counter dump, then run the reconciler's command line on the rest of argv."""
    counting(Path(argv[0]))
    reconciler_main(args=argv[1:], prog_name="reconciler")


if __name__ == "__main__":
    main(sys.argv[1:])
