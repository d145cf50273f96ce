"""The leader lease, kept on the Slurm controller: one JSON file changed under flock by one short command.

Why there: every login node already reaches the controller over SSH (the daemon's persistent session), the
controller's kernel is the one arbiter both daemons ask (flock serialises them), and its monotonic clock times
the lease, so the login nodes' clocks never matter. When the controller is down there is no Slurm to configure
either. Each request is a compare-and-swap: the holder renews only the term (epoch) it holds; anyone may take a
lease that expired, and taking it starts a new term (epoch + 1). A reboot of the controller (a new boot id)
expires every lease. The same directory keeps the leader's crash journal, written only by the current term's
holder, so a successor can finish what its predecessor left in flight.

Files in `dir` on the lease node: lease.json (holder, epoch, expiry), lease.lock, leases.log (one line per new
term or release), journal.json (the crash journal: rollout in flight, follow-ups, applied commit, writer's epoch),
operator.json (operator commands carried by any daemon's renewal, until the holder's renewal takes them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reconciler.desired.inventory import NodeSpec
from reconciler.transport.base import Transport

LEASE_SCRIPT = r'''
import fcntl, json, os, sys, time
req = json.load(sys.stdin)
d = req["dir"]
os.makedirs(d, mode=0o700, exist_ok=True)
lock = open(os.path.join(d, "lease.lock"), "a")
fcntl.flock(lock, fcntl.LOCK_EX)
def fsync_dir():
    fd = os.open(d, os.O_RDONLY)
    try: os.fsync(fd)
    finally: os.close(fd)
def load(name, default):
    try:
        with open(os.path.join(d, name)) as fh: return json.load(fh)
    except (OSError, ValueError): return default
def save(name, value):
    tmp = os.path.join(d, name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(value, fh); fh.flush(); os.fsync(fh.fileno())
    os.rename(tmp, os.path.join(d, name)); fsync_dir()
def log(event, lease):
    with open(os.path.join(d, "leases.log"), "a") as fh:
        fh.write(json.dumps({"at": time.time(), "event": event, "epoch": lease["epoch"],
                             "holder": lease["holder"]}) + "\n")
        fh.flush(); os.fsync(fh.fileno())
with open("/proc/sys/kernel/random/boot_id") as fh: boot = fh.read().strip()
now = time.monotonic()
lease = load("lease.json", {"epoch": 0, "holder": None, "expires": 0.0, "boot": boot})
live = bool(lease.get("holder")) and lease.get("boot") == boot and lease.get("expires", 0.0) > now
me, op, out = req.get("holder"), req["op"], {}
mine = live and lease.get("holder") == me and lease.get("epoch") == req.get("epoch")
if op == "acquire" and (mine or not live):
    if not mine:  # nobody holds it, it expired, or this holder lost its term (a restart): a new term
        # floor: a node refused a lower epoch (this store was lost and started over): terms go on above it
        epoch = max(int(lease.get("epoch", 0)) + 1, int(req.get("floor") or 0))
        lease.update(epoch=epoch, holder=me, since=time.time())
        log("acquired", lease)
    lease.update(expires=now + float(req["duration"]), boot=boot, renewed=time.time(), address=req.get("address"))
    save("lease.json", lease)
    live = out["granted"] = True
elif op == "release" and mine:
    lease["expires"] = 0.0
    save("lease.json", lease)
    log("released", lease)
    live = False
elif op == "save":
    if not mine:
        out["error"] = "not the holder of epoch %s (the lease is %s's, epoch %s)" % (
            req.get("epoch"), lease.get("holder") if live else "nobody", lease.get("epoch"))
    else:
        journal = load("journal.json", {})
        journal.update(req["entries"])
        journal["writer"] = {"holder": me, "epoch": req.get("epoch"), "at": time.time()}
        save("journal.json", journal)
if op == "load":
    out["journal"] = load("journal.json", {})
if req.get("requests") or (op == "acquire" and out.get("granted")):
    # operator commands (`reconciler upgrade ...`) given on either login node wait here for the holder
    waiting = load("operator.json", []) + list(req.get("requests") or [])
    if op == "acquire" and out.get("granted"):
        out["requests"], waiting = waiting, []
    if waiting or out.get("requests"):
        save("operator.json", waiting)
out.update(holder=lease.get("holder") if live else None, epoch=lease.get("epoch", 0),
           expires_in=max(0.0, lease.get("expires", 0.0) - now) if live else 0.0, since=lease.get("since"),
           address=lease.get("address") if live else None, last_holder=lease.get("holder"))
json.dump(out, sys.stdout)
lock.close()  # held through the whole request (closed, not left to exit: no ResourceWarning)
'''

LEASE_COMMAND = "python3 -c " + "'" + LEASE_SCRIPT.replace("'", "'\"'\"'") + "'"


class LeaseError(RuntimeError):
    """The lease node did not answer, or refused a journal write."""


@dataclass
class LeaseView:
    """What the lease node said: who holds the lease (None: nobody), in which term, for how much longer."""

    holder: str | None
    epoch: int
    expires_in: float
    since: float | None = None
    address: str | None = None
    last_holder: str | None = None
    journal: dict[str, Any] | None = None
    granted: bool = False  # an acquire that took or renewed the lease for the asker
    operator: list[dict[str, Any]] | None = None  # operator commands the holder's renewal took (daemon/operator.py)


class LeaseStore:
    """Requests to the lease directory on the lease node, over a transport."""

    def __init__(self, directory: str, timeout: float) -> None:
        self.directory, self.timeout = directory, timeout

    def call(self, transport: Transport, node: NodeSpec, request: dict[str, Any]) -> LeaseView:
        """Send one request; the lease as the node saw it (LeaseError when it did not answer or refused)."""
        result = transport.run(node, LEASE_COMMAND, stdin=json.dumps({**request, "dir": self.directory}),
                               timeout=self.timeout)
        if not result.ok:
            raise LeaseError(f"lease node {node.name}: {result.describe()}")
        try:
            answer = json.loads(result.stdout)
        except ValueError:
            raise LeaseError(f"lease node {node.name}: unreadable answer {result.stdout[-200:]!r}") from None
        if answer.get("error"):
            raise LeaseError(str(answer["error"]))
        return LeaseView(holder=answer.get("holder"), epoch=int(answer.get("epoch") or 0),
                         expires_in=float(answer.get("expires_in") or 0.0), since=answer.get("since"),
                         address=answer.get("address"), last_holder=answer.get("last_holder"),
                         journal=answer.get("journal"), granted=bool(answer.get("granted")),
                         operator=answer.get("requests"))
