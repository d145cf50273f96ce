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
    " def make_connection(self,host):self._connection=host,C('localhost');return self._connection[1]\n"
    "with x.ServerProxy('http://localhost',transport=T()) as s:\n"  # closes the socket (no ResourceWarning)
    " for i in s.supervisor.getAllProcessInfo():\n"
    "  print(i['group']+':'+i['name'] if i['group']!=i['name'] else i['name'],i['statename'],i['description'])\n"
)
SUPERVISOR_STATUS = f"python3 -c {shlex.quote(_SUPERVISOR_RPC)} 2>/dev/null || supervisorctl status || true"

# The same answer from inside the fact-gathering script (no process of its own: a python3 start and the
# http.client/xmlrpc imports were ~40 ms of a ~70 ms gather per node): one XML-RPC request written by hand
# over the socket (`_socket`: the `socket` and `re` modules would cost the script ~10 ms of imports), the reply
# read with string splits. Sets `stdout` as the script expects of its inline snippets; falls back to
# `supervisorctl status` (through the script's `run`) when the socket does not answer.
SUPERVISOR_SOCKETS = ("/var/run/supervisor.sock", "/run/supervisor.sock")
SUPERVISOR_STATUS_PY = """
import _socket
def _ask(paths, request):
    for path in paths:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(path)
            break
        except OSError:
            sock.close()
    else:
        raise OSError("no supervisord socket")
    try:
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        sock.close()
def _text(value):
    return (value.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&apos;", "'")
            .replace("&amp;", "&"))
def _value(member):
    value = member.partition("<value>")[2].partition("</value>")[0].strip()
    if value.startswith("<") and ">" in value:  # typed: <string>..</string>, <int>..</int>
        value = value[value.index(">") + 1:]
        value = value[:value.rfind("</")] if "</" in value else value
    return _text(value)
def _status(paths):
    body = (b'<?xml version="1.0"?><methodCall><methodName>supervisor.getAllProcessInfo</methodName>'
            b'<params></params></methodCall>')
    head = b"POST /RPC2 HTTP/1.0\\r\\nContent-Type: text/xml\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body)
    head, _, xml = _ask(paths, head + body).decode("utf-8", "replace").partition("\\r\\n\\r\\n")
    if " 200 " not in head.split("\\r\\n", 1)[0] or "<fault>" in xml:
        raise OSError("supervisord answered: " + head.split("\\r\\n", 1)[0])
    lines = []
    for struct in xml.split("<struct>")[1:]:
        info = {}
        for member in struct.partition("</struct>")[0].split("<name>")[1:]:
            name, _, rest = member.partition("</name>")
            info[_text(name.strip())] = _value(rest)
        name = info["name"] if info["group"] == info["name"] else info["group"] + ":" + info["name"]
        lines.append(" ".join((name, info["statename"], info["description"])))
    return "".join(line + "\\n" for line in lines)
try:
    stdout = _status(__SOCKETS__)
except Exception:
    stdout = run("supervisorctl status", timeout, env)[1]
"""


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


def status_python(manager: ServiceManager, services: list[str],
                  sockets: tuple[str, ...] = SUPERVISOR_SOCKETS) -> str | None:
    """Inline Python for the fact script printing what `status_command` prints, where there is one (supervisord)."""
    if manager.type == "supervisord":
        return SUPERVISOR_STATUS_PY.replace("__SOCKETS__", repr(tuple(sockets)))
    return None


def parse_status(manager: ServiceManager, services: list[str], output: str) -> dict[str, ServiceFact]:
    """Parse the output of `status_command` into a fact per asked service."""
    if manager.type == "systemd":
        found = parsers.parse_systemctl_is_active(services, output)
    elif manager.type == "supervisord":
        found = parsers.parse_supervisorctl_status(output)
    else:
        found = parsers.parse_custom_status(output)
    return {s: found.get(s, ServiceFact(name=s, running=False, detail="not found")) for s in services}

