"""How much output one command may bring back, kept as it arrives, and how passing the bound is reported.

Every transport (paramiko's sessions and agents, ClusterShell's tree workers) keeps at most MAX_OUTPUT bytes
of a command's stdout and the last MAX_STDERR bytes of its stderr, so a broken or hostile node cannot make the
daemon hold more; a node past the bound gets the same error, whichever transport reached it.
"""

from __future__ import annotations

MAX_OUTPUT = 64 * 1024 * 1024  # bytes of stdout one command may return (facts of a big node are a few MB)
MAX_STDERR = 64 * 1024  # the end of stderr is what explains a failure


def too_large_error(limit: int = MAX_OUTPUT) -> str:
    """The error of a command whose stdout passed LIMIT bytes."""
    size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"
    return f"answer larger than {size}: refused (the node's output is not read)"


class BoundedOutput:
    """One command's output as it arrives: stdout up to LIMIT bytes (past it, dropped and `too_large` set),
    and the last STDERR_KEPT bytes of stderr."""

    def __init__(self, limit: int = MAX_OUTPUT, stderr_kept: int = MAX_STDERR) -> None:
        self.limit = limit
        self.stderr_kept = stderr_kept
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.too_large = False
        self.peak = 0  # the most stdout bytes held at once (what the bound is about)

    def add_stdout(self, data: bytes) -> bool:
        """Keep DATA; False (and nothing kept, from now on) once the stdout is over the limit."""
        if self.too_large:
            return False
        self.stdout += data
        self.peak = max(self.peak, len(self.stdout))
        if len(self.stdout) > self.limit:
            self.too_large = True
            self.stdout = bytearray()  # released at once: nothing of a refused answer is read
            return False
        return True

    def add_stderr(self, data: bytes) -> None:
        """Keep DATA, forgetting all but the last `stderr_kept` bytes."""
        self.stderr += data
        if len(self.stderr) > self.stderr_kept:
            del self.stderr[:-self.stderr_kept]
