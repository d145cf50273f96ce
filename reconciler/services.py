"""Service managers: the commands that start or restart a service or ask whether it runs."""

from __future__ import annotations

import shlex
from typing import Literal

from reconciler.facts import parsers
from reconciler.facts.models import ServiceFact
from reconciler.model import ServiceManager

# supervisord's own XML-RPC over its socket, printing `supervisorctl status` lines: `supervisorctl` itself spends
# about 110 ms of CPU starting up (pkg_resources), a third of a whole gather on a busy node; this takes ~30 ms.
_SUPERVISOR_RPC = (
    "import http.client,socket,xmlrpc.client as x\n"
    "class C(http.client.HTTPConnection):\n"
    " def connect(self):\n"
    "  self.sock=socket.socket(socket.AF_UNIX);self.sock.settimeout(10)\n"
    "  for p in ('/var/run/supervisor.sock','/run/supervisor.sock'):\n"
    "   try:self.sock.connect(p);return\n"
    "   except OSError:pass\n"
    "  raise OSError('no socket')\n"
    "class T(x.Transport):\n"
    " def make_connection(self,host):return C('localhost')\n"
    "for i in x.ServerProxy('http://localhost',transport=T()).supervisor.getAllProcessInfo():\n"
    " print(i['group']+':'+i['name'] if i['group']!=i['name'] else i['name'],i['statename'],i['description'])\n"
)
SUPERVISOR_STATUS = f"python3 -c {shlex.quote(_SUPERVISOR_RPC)} 2>/dev/null || supervisorctl status || true"


Action = Literal["start", "stop", "restart", "reload", "enable", "disable"]


def control_command(manager: ServiceManager, action: Action, service: str) -> str:
    """The command that starts, stops, restarts, reloads, enables or disables a service under this manager.

    supervisord has no reload: its programs get SIGHUP (what their own reload does, for sshd and munged
    too); a custom manager without a reload command restarts. Only systemd enables: asking another manager
    raises ValueError (the schema refuses `enabled` there). `supervisorctl start` of a running program and
    `stop` of a stopped one exit 0, as systemctl does.
    """
    quoted = shlex.quote(service)
    if manager.type == "systemd":
        return f"systemctl {action} {quoted}"
    if action in ("enable", "disable"):
        raise ValueError(f"{manager.type} nodes have no {action}: only systemd enables services")
    if manager.type == "supervisord":
        return f"supervisorctl signal HUP {quoted}" if action == "reload" else f"supervisorctl {action} {quoted}"
    template = {"start": manager.start, "stop": manager.stop}.get(action, manager.restart)
    assert template is not None
    return template.replace("{service}", quoted)


ENABLED = "services_enabled"  # the fact command key of `enabled_command`


def enabled_command(services: list[str]) -> str:
    """systemd: one line `NAME STATE` per service (`enabled`, `disabled`, `static`, ...; `unknown` when
    systemctl says nothing), for `parse_enabled`."""
    names = " ".join(shlex.quote(s) for s in services)
    return (f'for s in {names}; do e=$(systemctl is-enabled "$s" 2>/dev/null | head -n1); '
            'echo "$s ${e:-unknown}"; done')


def parse_enabled(output: str) -> dict[str, str]:
    """Parse `enabled_command` output into service -> is-enabled word."""
    out = {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 2:
            out[fields[0]] = fields[1]
    return out


def status_command(manager: ServiceManager, services: list[str]) -> str:
    """One command printing the state of every service, for `parse_status`."""
    if manager.type == "systemd":
        return "systemctl is-active " + " ".join(shlex.quote(s) for s in services) + " || true"
    if manager.type == "supervisord":
        return SUPERVISOR_STATUS
    assert manager.status is not None
    return parsers.custom_status_command(manager.status, services)


def parse_status(manager: ServiceManager, services: list[str], output: str) -> dict[str, ServiceFact]:
    """Parse the output of `status_command` into a fact per asked service."""
    if manager.type == "systemd":
        found = parsers.parse_systemctl_is_active(services, output)
    elif manager.type == "supervisord":
        found = parsers.parse_supervisorctl_status(output)
    else:
        found = parsers.parse_custom_status(output)
    return {s: found.get(s, ServiceFact(name=s, running=False, detail="not found")) for s in services}

