"""Driver for managed files (`files:`): whole files on node sets, and what must follow when one changes.

A changing file carries its `notify:` entries as follow-ups (reconciler/engine/followups.py) on its Change;
the engine merges them, so a command or restart that several files ask for runs once per node. Secret
files are compared by sha256 only: their content is never gathered, diffed or shown. An age-encrypted source
(`.age`) is a secret decrypted on the login node before planning (reconciler/desired/agesecrets.py); a pull request's
plan never decrypts and compares ciphertexts with the main branch's instead (`encrypted_change`).
"""

from __future__ import annotations

import hashlib
import shlex

from reconciler.desired.inventory import slurm_node_set
from reconciler.desired.managed import render, selects
from reconciler.drivers.base import file_change
from reconciler.drivers.node_state import drain_steps, responding_command
from reconciler.drivers.phases import phase as phase_of
from reconciler.drivers.slurmctld_steps import reconfigure_step
from reconciler.drivers.step_order import ORDER_COMPUTE, ORDER_CONTROLLER, ORDER_MUNGE
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.followups import ORDER_SERVICE, FollowUp, command, service
from reconciler.engine.ops import RunCommand, WriteFile, fingerprint
from reconciler.engine.plan import Change
from reconciler.engine.undo import Restore
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import FileFact, NodeFacts
from reconciler.model import ManagedFile

# Within a phase's follow-ups: munge before slurmctld before slurmd (engine/followups.py); others between.
SERVICE_ORDER = {"munge": ORDER_MUNGE, "slurmctld": ORDER_CONTROLLER, "slurmd": ORDER_COMPUTE}


def secret_diff(path: str, node: str, before: str | None, after: str) -> str:
    """The diff a plan shows of a secret file: fingerprint lines only."""
    old = f"-<secret sha256:{before}>\n" if before else ""
    return (f"--- {node}:{path} (current)\n+++ {node}:{path} (desired)\n@@ secret: content not shown @@\n"
            f"{old}+<secret {fingerprint(after)}>\n")


def secret_change(driver: str, node: str, item: ManagedFile, fact: FileFact | None, desired: str,
                  phase: int) -> Change:
    """file_change for a secret: compared by sha256 and metadata, written whole, shown as fingerprints."""
    path = item.path
    write = WriteFile(path=path, content=desired, mode=item.mode, owner=item.owner, group=item.group,
                      validate_cmd=item.validate_cmd, secret=True, backup=False)
    if fact is None or not fact.exists:
        return Change(node=node, driver=driver, resource=path, action="create", phase=phase, ops=[write],
                      summary=f"create {path} (secret)", diff=secret_diff(path, node, None, desired))
    same = fact.sha256 == fingerprint(desired).removeprefix("sha256:")
    meta = [f"{k} {getattr(fact, k)} -> {v}" for k, v in (("mode", item.mode), ("owner", item.owner),
                                                          ("group", item.group)) if getattr(fact, k) != v]
    if same and not meta:
        return Change(node=node, driver=driver, resource=path, action="ok", phase=phase)
    write.expect_sha256 = fact.sha256
    summary = f"update {path} (secret" + (", content" if not same else "") + (f"; {', '.join(meta)}" if meta
                                                                              else "") + ")"
    return Change(node=node, driver=driver, resource=path, action="update", phase=phase, ops=[write],
                  summary=summary, diff=None if same else secret_diff(path, node, fact.sha256, desired))


def encrypted_change(ctx: Context, driver: str, node: str, item: ManagedFile, fact: FileFact | None,
                     phase: int) -> Change:
    """An age-encrypted file that was not decrypted. The cluster's own plan: an error (no identity, nothing to
    compare). A pull request's plan (which never decrypts): compared by ciphertext with the main branch's entry
    for the same path and node; a different ciphertext is shown as a secret change (it may be the same plaintext
    re-encrypted), an equal one leaves the content as main has it and compares mode, owner and group only."""
    path = item.path
    if ctx.read_secrets:
        from reconciler.desired.agesecrets import NO_IDENTITY

        return Change(node=node, driver=driver, resource=path, action="error", phase=phase,
                      summary=f"{path}: {item.source} not decrypted, cannot compare: {NO_IDENTITY}")
    enc, base = item._age, ctx.base
    if enc is None or base is None:
        return Change(node=node, driver=driver, resource=path, action="unknown", phase=phase,
                      summary=f"{path} (secret {item.source}: not decrypted in a pull request's plan: not compared)")
    old = next((b._age for b in base.files if b.path == path and b.encrypted and b._age is not None
                and selects(base, b, node)), None)
    exists = fact is not None and fact.exists
    if old is not None and old.sha256 == enc.sha256:
        meta = [f"{k} {getattr(fact, k)} -> {v}" for k, v in (("mode", item.mode), ("owner", item.owner),
                                                              ("group", item.group)) if getattr(fact, k) != v]
        if not exists:
            return Change(node=node, driver=driver, resource=path, action="create", phase=phase,
                          summary=f"create {path} (secret unchanged by this pull request; missing on the node)")
        if meta:
            return Change(node=node, driver=driver, resource=path, action="update", phase=phase,
                          summary=f"update {path} (secret unchanged by this pull request; {', '.join(meta)})")
        return Change(node=node, driver=driver, resource=path, action="ok", phase=phase,
                      summary=f"{path} (secret unchanged by this pull request)")
    was = old.fingerprint if old is not None else "none on main"
    diff = (f"--- {node}:{path} (main)\n+++ {node}:{path} (this pull request)\n"
            f"@@ secret: content not shown; not decrypted in a pull request's plan @@\n"
            + (f"-<age ciphertext {old.fingerprint}>\n" if old is not None else "")
            + f"+<age ciphertext {enc.fingerprint}>\n")
    return Change(node=node, driver=driver, resource=path, action="update" if exists else "create", phase=phase,
                  summary=f"{'update' if exists else 'create'} {path} (secret changed in this pull request: "
                  f"ciphertext {was} -> {enc.fingerprint}; not decrypted here, so not compared with the node)",
                  diff=diff)


def removal(driver: str, node: str, item: ManagedFile, fact: FileFact | None, phase: int) -> Change:
    """`state: absent`: nothing to do where the file is missing; else moved aside as PATH.reconciler-bak (a secret
    removed outright, its old content must go), never a directory; the undo puts the old content back when the
    facts read it."""
    path = item.path
    if fact is None or not fact.exists:
        return Change(node=node, driver=driver, resource=path, action="ok", phase=phase)
    q, bak = shlex.quote(path), shlex.quote(path + ".reconciler-bak")
    gone = f"rm -f -- {q}" if item.secret else f"mv -f -- {q} {bak}"
    command = (f"if [ -d {q} ] && [ ! -L {q} ]; then echo {shlex.quote(path + ' is a directory: not removed')} >&2;"
               f" exit 1; fi; if [ -e {q} ] || [ -L {q} ]; then {gone}; fi")
    kept = "" if item.secret else f", kept as {path}.reconciler-bak"
    change = Change(node=node, driver=driver, resource=path, action="delete", phase=phase,
                    ops=[RunCommand(command=command, description=f"remove {path}")],
                    summary=f"remove {path} ({fact.size} bytes{kept})")
    old = fact.content
    if item.secret or old is None or hashlib.sha256(old.encode()).hexdigest() != fact.sha256:
        change.restore = Restore.none(f"{path}: its old content was not read whole (secret, too large or not text)")
    else:
        change.restore = Restore(summary=f"{path} back ({fact.size} bytes, mode {fact.mode} {fact.owner}:"
                                         f"{fact.group})", check=f"[ -f {q} ]",
                                 ops=[WriteFile(path=path, content=old, mode=fact.mode, owner=fact.owner,
                                                group=fact.group)])
    return change


class ManagedFilesDriver(DriverDefaults):
    """Keeps whole files (inline, from the repository, or templated per node) and notifies what follows."""

    name = "managed_files"
    phase = phase_of("managed_files")

    def _files(self, ctx: Context, node: str) -> list[ManagedFile]:
        return [item for item in ctx.state.files if selects(ctx.state, item, node)]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Each file (secret ones by sha256 only) and the state of every service a file may restart."""
        for item in self._files(ctx, node):
            req.files.append(item.path)
            if item.secret:  # (a file to remove: its content is read too, for the undo)
                req.secret.append(item.path)
            req.services += [target for kind, target, _ in item.notifications() if kind in ("reload", "restart")]

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """A change per file whose content, mode, owner or group differs, carrying its notify follow-ups."""
        changes = []
        for item in self._files(ctx, node):
            if item.state == "absent":
                changes.append(removal(self.name, node, item, facts.files.get(item.path), self.phase))
                if changes[-1].changing:
                    changes[-1].followups = self.notified(ctx, node, item, facts)
                continue
            desired = render(ctx.state, item, node)
            if desired is None and item.encrypted:
                changes.append(encrypted_change(ctx, self.name, node, item, facts.files.get(item.path), self.phase))
                if changes[-1].changing:
                    changes[-1].followups = self.notified(ctx, node, item, facts)
                continue
            if desired is None:
                changes.append(Change(node=node, driver=self.name, resource=item.path, action="error",
                                      phase=self.phase, summary=f"{item.path}: source {item.source} was not read"))
                continue
            fact = facts.files.get(item.path)
            if item.secret:
                change = secret_change(self.name, node, item, fact, desired, self.phase)
            else:
                change = file_change(self.name, node, item.path, fact, desired, phase=self.phase, mode=item.mode,
                                     owner=item.owner, group=item.group, validate_cmd=item.validate_cmd)
            if change.changing:
                change.followups = self.notified(ctx, node, item, facts)
            changes.append(change)
        return changes

    def notified(self, ctx: Context, node: str, item: ManagedFile, facts: NodeFacts) -> list[FollowUp]:
        """The follow-ups a change of ITEM on NODE asks for."""
        reason = f"{item.path} {'removed' if item.state == 'absent' else 'changed'} on {node}"
        ctl = ctx.controller
        steps = []
        for kind, target, rolling in item.notifications():
            if kind == "command":
                steps.append(command(node, target, self.phase, reason))
            elif kind == "reconfigure":
                steps.append(reconfigure_step(ctx, self.phase, reason))
            elif kind == "reload":
                steps.append(service(node, "reload", target, self.phase, reason,
                                     order=SERVICE_ORDER.get(target, ORDER_SERVICE)))
            else:
                unit = facts.services.get(target)
                slurm_node = node in slurm_node_set(ctx.state)
                drain = drain_steps(ctl, node) if rolling and slurm_node else None
                ready = responding_command(node) if target == "slurmd" and slurm_node else None
                steps.append(service(
                    node, "start" if unit is not None and not unit.running else "restart", target, self.phase,
                    reason, order=SERVICE_ORDER.get(target, ORDER_SERVICE), rolling=rolling, drain=drain,
                    ready=ready, ready_on=ctl if ready else None,
                    jobs=[job.job_id for job in ctx.facts.jobs_on(node)] if drain else ()))
        return steps
