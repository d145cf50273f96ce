"""How the reconciler reaches nodes: a Transport runs shell commands; SSHTransport does it over SSH."""

from reconciler.backend.base import BaseTransport, CommandResult, Transport
from reconciler.backend.hostkeys import HostKeyRefused
from reconciler.backend.session import wrap_command
from reconciler.backend.ssh import ConnectError, SSHTransport

__all__ = ["BaseTransport", "CommandResult", "ConnectError", "HostKeyRefused", "SSHTransport", "Transport",
           "wrap_command"]
