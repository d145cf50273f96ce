"""The steps that make slurmctld read its configuration again, and how to tell that it really did.

From 23.11 `scontrol reconfigure` re-executes slurmctld: the command returns 0 at once, the old process may still
answer a ping, and only then the new one reads the files; a bad file (a plugin that does not load) makes it
exit with `fatal:`. So `scontrol ping` being UP right after the command proves nothing: it is ready once
slurmctld answers AND started no earlier than the newest file of its configuration directory (BOOT_TIME from
`scontrol show config`, to the second). 22.05 re-reads in place (BOOT_TIME does not move): UP is enough there.
Where the service manager says slurmctld died for good (supervisord FATAL, systemd failed) waiting stops, and
the failure carries slurmctld's last `fatal:` line.
"""

from __future__ import annotations

import posixpath
import shlex

from reconciler.drivers.step_order import ORDER_RECONFIGURE
from reconciler.engine.context import Context
from reconciler.engine.followups import FollowUp
from reconciler.facts.parsers import family_of
from reconciler.model import ServiceManager
from reconciler.render.files import file_path

RECONFIGURE = "scontrol reconfigure"
REEXEC_FROM = (23, 11)  # the first family whose reconfigure re-executes slurmctld


def reexecs(family: str | None) -> bool:
    """True when `scontrol reconfigure` of this Slurm family re-executes slurmctld (23.11 and later)."""
    try:
        major, minor = (int(x) for x in (family or "").split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= REEXEC_FROM


def running_family(ctx: Context) -> str:
    """The Slurm family slurmctld runs (its facts), else the one the desired state declares."""
    facts = ctx.facts.nodes.get(ctx.controller)
    found = family_of(facts.slurm_version) if facts is not None and facts.reachable else None
    return found or ctx.state.cluster.slurm_version


def _why_down(conf: str) -> str:
    """Shell printing what is known of a slurmctld that is not ready: its ping and its log's last fatal line."""
    conf_q = shlex.quote(conf)
    return ("echo \"slurmctld not ready: $(scontrol ping 2>&1 | head -n1)\" >&2; "
            f"log=$(sed -n 's/^[Ss][Ll][Uu][Rr][Mm][Cc][Tt][Ll][Dd][Ll][Oo][Gg][Ff][Ii][Ll][Ee]=//p' {conf_q} "
            "2>/dev/null | tail -n1); "
            "{ if [ -n \"$log\" ] && [ -r \"$log\" ]; then tail -n 200 \"$log\"; "
            "else journalctl -u slurmctld -n 200 -o cat 2>/dev/null; fi; } | grep 'fatal:' | tail -n1 >&2; exit 1")


def controller_ready(conf: str, *, since_files: bool) -> str:
    """Shell on the controller: exits 0 once slurmctld answers (and, with SINCE_FILES, started no earlier than
    the newest *.conf beside CONF); else prints why not on stderr and exits 1."""
    up = "scontrol ping 2>/dev/null | grep -q 'is UP'"
    if since_files:
        folder = shlex.quote(posixpath.dirname(conf) or "/")
        up += (" && b=$(scontrol show config 2>/dev/null | sed -n 's/^BOOT_TIME *= *//p') && [ -n \"$b\" ]"
               f" && n=$(find {folder} -maxdepth 1 -name '*.conf' -printf '%T@\\n' | sort -n | tail -n1)"
               " && [ \"$(date -d \"$b\" +%s)\" -ge \"${n%.*}\" ]")
    return f"if {up}; then exit 0; fi; {_why_down(conf)}"


def controller_gone(manager: ServiceManager) -> str | None:
    """Shell on the controller: exits 0 when the service manager gave slurmctld up (no point waiting on)."""
    if manager.type == "supervisord":
        return "supervisorctl status slurmctld 2>/dev/null | grep -Eq '^slurmctld +(FATAL|EXITED) '"
    if manager.type == "systemd":
        return "systemctl is-failed --quiet slurmctld"
    return None


def reconfigure_step(ctx: Context, phase: int, reason: str) -> FollowUp:
    """`scontrol reconfigure` on the controller, ready once slurmctld runs the new files (re-executed from
    23.11); where slurmctld does not run when the step comes (a rollback after it died), it is started. It runs
    after a slurmctld restart of the same phase (ORDER_RECONFIGURE)."""
    ctl = ctx.controller
    conf = file_path(ctx.state, "slurm.conf")
    return FollowUp(node=ctl, kind="command", target=RECONFIGURE, phase=phase, order=ORDER_RECONFIGURE,
                    reasons=[reason], service="slurmctld",
                    ready=controller_ready(conf, since_files=reexecs(running_family(ctx))),
                    gone=controller_gone(ctx.specs[ctl].service_manager))


def controller_steps_ready(ctx: Context) -> tuple[str, str | None]:
    """`ready` and `gone` for a slurmctld (re)start after its files changed: it must answer having read them."""
    ctl = ctx.controller
    return (controller_ready(file_path(ctx.state, "slurm.conf"), since_files=True),
            controller_gone(ctx.specs[ctl].service_manager))
