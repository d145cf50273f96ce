"""The reconcile loop's target: fetch and verify the Git source (or hash the watched directory), validate a new
head, load and decrypt the desired state it names; an earlier commit's target for rollbacks and recovery."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from reconciler.common import clock
from reconciler.daemon import notify
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.logs import redact_url_credentials
from reconciler.daemon.loop_core import Common, Notices, new_run_id
from reconciler.daemon.loop_state import LoopState, Target
from reconciler.daemon.watched import content_hash
from reconciler.desired.agesecrets import has_encrypted, load_identities, require_identity, unlock
from reconciler.desired.clusters import load_state, read_promotion
from reconciler.desired.loader import DesiredStateError, LoadedState
from reconciler.model import SSHDefaults


class Targets:
    """What to reconcile: the newest good commit (or local content), loaded with the daemon's SSH overrides."""

    def __init__(self, common: Common, state: LoopState, source: GitSource | None, notices: Notices) -> None:
        self.common, self.state, self.source, self.notices = common, state, source, notices
        # The identity that decrypts the desired state's .age files (read once: `run` checked it can be read).
        config = common.config
        self.age_identity = str(common.config_dir / config.age_identity) if config.age_identity else None
        self.age_identities = load_identities(self.age_identity) if self.age_identity else None
        self.failing_since: float | None = None  # first of the current run of failed fetches
        self.down_sent = False

    def resolve(self) -> tuple[Target | None, bool]:
        """The target (newest good commit, or the watched directory's content) and whether it is new."""
        if self.source is not None:
            return self.resolve_git()
        assert self.common.config.watch is not None
        return self.resolve_local(Path(self.common.config.watch))

    def resolve_git(self) -> tuple[Target | None, bool]:
        """Fetch, validate a new head; return the target (newest good commit) and whether it is new."""
        assert self.source is not None
        fetched = self.source.fetch()
        if fetched.error:
            self.common.log.warning("source.fetch_failed", error=fetched.error, keeping=self.state.good)
            self.common.store.set("source_error", {"error": fetched.error, "at": clock.wall()})
        else:
            self.common.store.set("source_error", None)
        self.watch(fetched.error)
        head = fetched.head
        if head is None:
            return None, False
        self.common.metrics.set_commit(self.common.metrics.head_commit, head, self.source.subject(head))
        good_before = self.state.good
        if head != self.state.seen_head:
            self._consider(head)
        new = self.state.good != good_before  # a new head that fails validation changes nothing
        if self.state.good is None:
            return None, new
        directory = self.source.checkout(self.state.good)
        return self.load_target(self.state.good, self.source.subject(self.state.good), directory), new

    def _consider(self, head: str) -> None:
        """Verify and validate a new branch head; it becomes the good commit only when both pass."""
        assert self.source is not None
        self.state.seen_head = head
        self.common.store.set("seen_head", head)
        subject = self.source.subject(head)
        run_id = new_run_id()
        unsigned = self.source.verify(head)
        if unsigned:
            self.common.store.start_run(run_id, "commit", self.common.config.mode, head, subject)
            self.common.store.finish_run(run_id, "unverified", error=unsigned)
            self.common.store.set("head_status", {"commit": head, "status": "unverified", "errors": [unsigned]})
            self.common.metrics.source_ok.set(0)
            self.common.metrics.runs.labels(outcome="unverified").inc()
            self.common.log.error("commit.unverified", commit=head, error=unsigned, keeping=self.state.good)
            self.notices.send(lambda: notify.invalid_commit_message(head, [unsigned], subject, why="unverified"))
            return
        directory = self.source.checkout(head)
        try:
            self._load(directory, commit=head)
        except DesiredStateError as exc:
            errors = [str(e) for e in exc.errors]
            self.common.store.start_run(run_id, "commit", self.common.config.mode, head, subject)
            self.common.store.finish_run(run_id, "invalid", error="\n".join(errors))
            self.common.store.set("head_status", {"commit": head, "status": "invalid", "errors": errors})
            self.common.metrics.source_ok.set(0)
            self.common.metrics.runs.labels(outcome="invalid").inc()
            self.common.log.error("commit.invalid", commit=head, errors=errors, keeping=self.state.good)
            self.notices.send(lambda: notify.invalid_commit_message(head, errors, subject))
            return
        self.common.store.set("head_status", {"commit": head, "status": "valid", "errors": []})
        self.common.metrics.source_ok.set(1)
        self.state.good = head
        self.common.store.set("good_commit", head)
        self.common.log.info("commit.valid", commit=head, subject=subject)

    def resolve_local(self, directory: Path) -> tuple[Target | None, bool]:
        """Local mode: the content of the directory's files (watched.state_files) is the 'commit'."""
        digest = content_hash(directory, (self.common.config.state_path.resolve(),))
        new = digest != self.state.seen_head
        if new:
            self.state.seen_head = digest
            self.common.store.set("seen_head", digest)
            try:
                self._load(directory)
            except DesiredStateError as exc:
                errors = [str(e) for e in exc.errors]
                run_id = new_run_id()
                self.common.store.start_run(run_id, "watch", self.common.config.mode, digest, None)
                self.common.store.finish_run(run_id, "invalid", error="\n".join(errors))
                self.common.store.set("head_status", {"commit": digest, "status": "invalid", "errors": errors})
                self.common.metrics.source_ok.set(0)
                self.common.log.error("local.invalid", commit=digest, errors=errors)
                self.notices.send(lambda: notify.invalid_commit_message(digest, errors))
                return None, new
            self.common.store.set("head_status", {"commit": digest, "status": "valid", "errors": []})
            self.common.metrics.source_ok.set(1)
            self.state.good = digest
            self.common.store.set("good_commit", digest)
        if self.state.good != digest:
            return None, new
        return self.load_target(digest, None, directory), new

    def _load(self, directory: Path, commit: str | None = None) -> LoadedState:
        """Load a desired state and decrypt its .age files with `age_identity` (DesiredStateError, with file:line,
        for a wrong key, a damaged file, or no identity configured: the commit is then invalid, nothing applied)."""
        loaded = load_state(directory, self.common.config.cluster, commit=commit)
        if self.common.config.cluster is not None:
            read_promotion(directory)  # a wrong promotion.yaml makes the commit invalid (file:line errors)
        if has_encrypted(loaded.state):
            if self.age_identity is None or self.age_identities is None:
                require_identity(loaded)
            else:
                unlock(loaded, self.age_identities, self.age_identity)
        return loaded

    def load_target(self, commit: str, subject: str | None, directory: Path) -> Target | None:
        """COMMIT's desired state in DIRECTORY with the daemon's SSH overrides (None: it no longer loads)."""
        try:
            loaded = self._load(directory, commit=None if commit.startswith("local:") else commit)
        except DesiredStateError as exc:  # the good commit no longer loads (e.g. a file outside Git changed)
            self.common.log.error("target.invalid", commit=commit, errors=[str(e) for e in exc.errors])
            return None
        loaded.state = self._with_ssh_overrides(loaded.state)
        return Target(commit=commit, subject=subject, loaded=loaded)

    def _with_ssh_overrides(self, state: Any) -> Any:
        overrides = self.common.config.ssh.model_dump(exclude_none=True)
        if not overrides:
            return state
        for key in ("config", "known_hosts", "identity_file"):
            if key in overrides:
                overrides[key] = str((self.common.config_dir / overrides[key]).resolve())
        ssh = SSHDefaults.model_validate({**state.ssh.model_dump(), **overrides})
        return state.model_copy(update={"ssh": ssh})

    def watch(self, error: str | None) -> None:
        """One message when fetches have failed for source_unreachable_after, one when they work again."""
        if self.notices.notifier is None:
            return
        now = time.monotonic()
        source = self.common.config.repository.url if self.common.config.repository else "the repository"
        if error is None:
            if self.down_sent:
                self.notices.send(lambda: notify.source_message(redact_url_credentials(source), None, None))
            self.failing_since, self.down_sent = None, False
            return
        if self.failing_since is None:
            self.failing_since = now
        failing = now - self.failing_since
        if not self.down_sent and failing >= self.notices.notifier.source_unreachable_after:
            self.down_sent = True
            self.notices.send(lambda: notify.source_message(redact_url_credentials(source), error, failing))

    def target_of(self, commit: str | None) -> Target | None:
        """The target of an earlier commit (the applied one, a rollout's): from memory, or checked out again."""
        if commit is None:
            return None
        if self.state.applied_target is not None and self.state.applied_target.commit == commit:
            return self.state.applied_target
        if self.source is None or commit.startswith("local:"):
            return None  # local mode keeps only the applied content it saw
        directory = self.source.checkout(commit)
        return self.load_target(commit, self.source.subject(commit), directory)
