"""A bare 2-node testbed configured once, and a Git remote holding its desired state, for the daemon tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import DaemonProcess, GitRemote, write_config
from tests.daemon.promotion_bed import Staging
from tests.engine.conftest import Bed
from tests.engine.testbed_state import write_state
from tests.testbed_fixture import Testbed
from tests.transport.sshd_server import free_port


@dataclass
class DaemonBed:
    """The testbed, the Git remote of its desired state, and a factory of daemons."""

    bed: Bed
    remote: GitRemote
    root: Path
    counter: itertools.count[int]
    started: list[DaemonProcess]

    def daemon(self, env: dict[str, str] | None = None, **config: Any) -> DaemonProcess:
        """Start `reconciler run` on the remote with a fresh state directory and these config values (ENV: added to
        its environment)."""
        n = next(self.counter)
        state_dir = self.root / f"state{n}"
        values: dict[str, Any] = {"repository": {"url": str(self.remote.bare), "branch": "main"},
                                  "mode": "enforce", "poll_interval": "1s", "drift_interval": "10m",
                                  "state_dir": str(state_dir), "metrics_listen": f"127.0.0.1:{free_port()}",
                                  "log_format": "json", "retry": {"initial": "2s", "max": "10s"}}
        values.update(config)
        state_dir = Path(values["state_dir"])
        path = write_config(self.root / f"config{n}.yaml", **values)
        daemon = DaemonProcess(config=path, state_dir=state_dir, log_path=self.root / f"daemon{n}.log",
                               env=env or {}).start()
        self.started.append(daemon)
        return daemon


@pytest.fixture(scope="package")
def dbed(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonBed]:
    """Bare testbed + desired state in a real bare Git repo (the daemon configures the cluster on first start)."""
    testbed = testbed_factory(nodes=2, bare=True)
    desired = write_state(tmp_path_factory.mktemp("desired"), name="rtdmn", state_dir=testbed.state_dir,
                          subnet=testbed.subnet, computes="gpu[01-02]")
    root = tmp_path_factory.mktemp("daemon")
    remote = GitRemote.create(root, desired)
    state = DaemonBed(Bed(testbed=testbed, desired=desired), remote, root, itertools.count(1), [])
    yield state
    for daemon in state.started:
        daemon.kill()


@pytest.fixture
def staging(tmp_path: Path) -> Iterator[Staging]:
    """Staging's store and listener (tests/daemon/promotion_bed.py), serving until the test ends."""
    upstream = Staging(tmp_path / "staging.db")
    upstream.serve()
    yield upstream
    upstream.down()
    upstream.store.close()
