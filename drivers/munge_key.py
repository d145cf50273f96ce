"""Driver for the munge key: one key, read where the reconciler runs (never from Git in the clear: a `key_age`
file of the repository is age-encrypted and decrypted on the login node), on every Slurm node.

The key is compared by sha256 only (a hash-only file fact: the node's key never travels back), shown as a
fingerprint (`munge key sha256:<16 hex>`), and written with the remote writer (temp + fsync + rename, 0400
munge:munge, no backup of the old key). A rotation restarts munge on every node whose key changed, then
slurmctld, then slurmd rolling with drain-first (docs/yaml-reference.md, "The munge key").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping

from reconciler.desired.inventory import slurm_node_set
from reconciler.drivers.node_state import CONTROLLER_UP, drain_steps, responding_command
from reconciler.drivers.phases import phase as phase_of
from reconciler.drivers.step_order import ORDER_COMPUTE, ORDER_CONTROLLER, ORDER_MUNGE
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.followups import FollowUp, service
from reconciler.engine.ops import WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.engine.review import PlanEdit, Warn
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import FileFact, NodeFacts
from reconciler.model import Munge
from reconciler.render.files import is_slurm_node

KEY_PATH = "/etc/munge/munge.key"
MIN_BYTES, MAX_BYTES = 32, 1024  # what munged accepts; `mungekey` makes 128 bytes
MODE, OWNER, GROUP = "0400", "munge", "munge"
MUNGE_UP = "munge -n >/dev/null"


class MungeKeyError(ValueError):
    """The munge key could not be read or is not a munge key; the message names the source, never the key."""


class MungeKey:
    """A munge key's bytes, kept out of repr, str and every message; known outside by its fingerprint."""

    __slots__ = ("_data", "source", "sha256")

    def __init__(self, data: bytes, source: str) -> None:
        self._data = data
        self.source = source
        self.sha256 = hashlib.sha256(data).hexdigest()

    @property
    def fingerprint(self) -> str:
        """`sha256:` and the first 16 hex digits of the key's sha256."""
        return fingerprint(self.sha256)

    def base64(self) -> str:
        """The key in base64, for the remote writer's request only."""
        return base64.b64encode(self._data).decode()

    def __repr__(self) -> str:
        return f"MungeKey({self.source}, {self.fingerprint})"

    __str__ = __repr__


def fingerprint(sha256: str | None) -> str:
    """How plans name a key: `sha256:<first 16 hex>` (`none` when there is no key)."""
    return f"sha256:{sha256[:16]}" if sha256 else "none"


def describe_source(munge: Munge) -> str:
    """The key's source in words: `key_file /etc/reconciler/munge.key` or `key_env MUNGE_KEY_B64`."""
    if munge.key_age:
        return f"key_age {munge.key_age}"
    return f"key_file {munge.key_file}" if munge.key_file else f"key_env {munge.key_env}"


def read_key(munge: Munge, environ: Mapping[str, str] | None = None) -> MungeKey:
    """Read the key from its file or environment variable on this machine, or take it as decrypted from its
    key_age file (agesecrets.unlock, with the login node's age identity); MungeKeyError names what is wrong."""
    source = describe_source(munge)
    if munge.key_age:
        if munge._key is None:
            from reconciler.desired.agesecrets import NO_IDENTITY

            raise MungeKeyError(f"munge key ({source}): not decrypted: {NO_IDENTITY}")
        data = munge._key
    elif munge.key_file:
        try:
            with open(munge.key_file, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            raise MungeKeyError(f"munge key ({source}): cannot read: {exc.strerror or type(exc).__name__}") from None
    else:
        raw = (os.environ if environ is None else environ).get(str(munge.key_env))
        if raw is None or not raw.strip():
            raise MungeKeyError(f"munge key ({source}): the environment variable is not set")
        try:
            data = base64.b64decode("".join(raw.split()), validate=True)
        except (binascii.Error, ValueError):
            raise MungeKeyError(f"munge key ({source}): not valid base64") from None
    if not MIN_BYTES <= len(data) <= MAX_BYTES:
        size = f"more than {MAX_BYTES}" if len(data) > MAX_BYTES else str(len(data))
        raise MungeKeyError(f"munge key ({source}): {size} bytes; a munge key has {MIN_BYTES} to {MAX_BYTES} bytes "
                            "(`mungekey` makes 128)")
    return MungeKey(data, source)


class MungeKeyDriver(DriverDefaults):
    """Keeps /etc/munge/munge.key on every Slurm node equal to the key of the login node, 0400 munge:munge."""

    name = "munge_key"
    scope = "cluster"  # one key for the whole cluster: nodes with different keys cannot talk
    phase = phase_of("munge_key")

    def __init__(self) -> None:
        self._key: tuple[int, int, MungeKey | MungeKeyError] | None = None  # per plan: (ctx, facts, key)

    def managed(self, ctx: Context, node: str) -> bool:
        """Whether the node's munge key is ours to keep (munge set, a node that runs Slurm)."""
        return ctx.state.munge is not None and is_slurm_node(ctx.state, node)

    def key(self, ctx: Context) -> MungeKey | MungeKeyError:
        """The key, read once per plan (every node gets the same bytes even if the file changes meanwhile)."""
        munge = ctx.state.munge
        assert munge is not None
        if self._key is None or self._key[:2] != (id(ctx), id(ctx.facts)):
            try:
                found: MungeKey | MungeKeyError = read_key(munge)  # the loader refused a key_file in the repo
            except MungeKeyError as exc:
                found = exc
            self._key = (id(ctx), id(ctx.facts), found)
        return self._key[2]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """The key file's hash, mode and owner (never its content), and whether munged runs."""
        if self.managed(ctx, node):
            req.hashes.append(KEY_PATH)
            req.services.append("munge")

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """One change when the node's key differs from the login node's by sha256, or its mode/owner do."""
        if not self.managed(ctx, node) or not ctx.read_secrets:
            return []
        key = self.key(ctx)
        if isinstance(key, MungeKeyError):
            return [Change(node=node, driver=self.name, resource=KEY_PATH, action="error", phase=self.phase,
                           summary=str(key))]
        return [key_change(self.name, node, facts.files.get(KEY_PATH), key, self.phase)]

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """A pull request's plan reads no secrets: says the key was not compared."""
        if ctx.state.munge is not None and not ctx.read_secrets:
            return [Warn(f"munge key ({describe_source(ctx.state.munge)}) not compared: a pull request's plan "
                         "reads no secrets; a key change shows in the cluster's own plan")]
        return []

    def followups(self, ctx: Context, plan: Plan) -> list[FollowUp]:
        """munge restarts where the key changed (all at once), then slurmctld, then slurmd rolling, drained first."""
        munge = ctx.state.munge
        key = self._key[2] if self._key else None
        self._key = None  # the next plan reads the key again (a rotation between two plans is seen)
        if munge is None:
            return []
        if not ctx.read_secrets:
            return []
        if not isinstance(key, MungeKey):
            return []
        rotated = sorted({c.node for c in plan.changing() if c.driver == self.name
                          and _sha(ctx, c.node) != key.sha256})
        steps: list[FollowUp] = []
        for node, facts in sorted(ctx.facts.nodes.items()):
            if not facts.reachable or not self.managed(ctx, node) or (ctx.limit is not None and node not in ctx.limit):
                continue
            unit = facts.services.get("munge")
            if node in rotated:
                steps.append(service(node, "restart", "munge", self.phase,
                                     f"munge key changed on {node} ({fingerprint(_sha(ctx, node))} -> "
                                     f"{key.fingerprint})", order=ORDER_MUNGE, ready=MUNGE_UP))
            elif unit is not None and not unit.running:
                steps.append(service(node, "start", "munge", self.phase, f"munge is not running on {node}",
                                     order=ORDER_MUNGE, ready=MUNGE_UP))
        ctl = ctx.controller
        for node in ctx.state.cluster.controller_names:  # the primary and any backup controller
            if node in rotated and _running(ctx, node, "slurmctld"):
                steps.append(service(node, "restart", "slurmctld", self.phase,
                                     f"munge key changed on {node}: slurmctld restarts after munge",
                                     order=ORDER_CONTROLLER, ready=CONTROLLER_UP))
        computes = slurm_node_set(ctx.state)
        for node in rotated:
            if node in computes and _running(ctx, node, "slurmd"):
                steps.append(service(node, "restart", "slurmd", self.phase,
                                     f"munge key changed on {node}: slurmd restarts after munge and slurmctld",
                                     order=ORDER_COMPUTE, rolling=True, drain=drain_steps(ctl, node),
                                     ready=responding_command(node), ready_on=ctl,
                                     jobs=[job.job_id for job in ctx.facts.jobs_on(node)]))
        return steps


def key_change(driver: str, node: str, fact: FileFact | None, key: MungeKey, phase: int) -> Change:
    """Compare a node's key (by its hash-only fact) with the key; the write carries the key as a secret."""
    def write() -> WriteFile:
        return WriteFile(path=KEY_PATH, content=key.base64(), encoding="base64", secret=True, backup=False,
                         mode=MODE, owner=OWNER, group=GROUP,
                         expect_sha256=fact.sha256 if fact is not None and fact.exists else None)

    if fact is None or not fact.exists:
        why = f": {fact.error}" if fact is not None and fact.error else ""
        return Change(node=node, driver=driver, resource=KEY_PATH, action="create", phase=phase, ops=[write()],
                      summary=f"create {KEY_PATH} (munge key {key.fingerprint}){why}")
    meta = [f"{k} {getattr(fact, k)} -> {v}" for k, v in (("mode", MODE), ("owner", OWNER), ("group", GROUP))
            if getattr(fact, k) != v]
    if fact.sha256 == key.sha256 and not meta:
        return Change(node=node, driver=driver, resource=KEY_PATH, action="ok", phase=phase)
    what = ([f"munge key {fingerprint(fact.sha256)} -> {key.fingerprint}"] if fact.sha256 != key.sha256 else [])
    return Change(node=node, driver=driver, resource=KEY_PATH, action="update", phase=phase, ops=[write()],
                  summary=f"update {KEY_PATH} ({', '.join(what + meta)})")


def _sha(ctx: Context, node: str) -> str | None:
    facts = ctx.facts.nodes.get(node)
    fact = facts.files.get(KEY_PATH) if facts else None
    return fact.sha256 if fact is not None and fact.exists else None


def _running(ctx: Context, node: str, service_name: str) -> bool:
    """A daemon that does not run holds nothing made with the old key: starting it is not ours to do."""
    facts = ctx.facts.nodes.get(node)
    unit = facts.services.get(service_name) if facts else None
    return unit is not None and unit.running
