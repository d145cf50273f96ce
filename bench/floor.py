"""The floor: one `true` per node, over plain OpenSSH and over paramiko, as many in parallel as forks.

- OpenSSH: `ssh -F <testbed ssh_config> NODE true` per node from a thread pool (cold: a new connection each;
  warm: through a ControlMaster opened before, so only a session is opened).
- paramiko: `python -m bench.floor paramiko CONFIG FORKS NODE...`: in a fresh process, per node from a thread
  pool, connect (the ssh_config's HostName, User, IdentityFile, ProxyCommand; known_hosts, unknown keys
  refused), exec `true`, close; prints `{"inner_s": connect to close, without interpreter start}`.
  `paramiko-warm` connects every node, prints `{"connected": N}`, then for every line read on stdin runs one
  round of exec `true` over the open connections (what a drift check over persistent sessions cannot go
  below) and prints `{"wall_s", "cpu_s"}` (this process's CPU, every thread, plus its live proxy children's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import Timed, children_cpu


def live_children_cpu(pid: int | None = None) -> float:
    """CPU seconds of the live direct children of a process (e.g. ProxyCommand relays), from /proc."""
    pid = os.getpid() if pid is None else pid
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:  # ppid
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def self_cpu() -> float:
    """CPU seconds of this process (every thread) and of its children, live and reaped."""
    return time.process_time() + children_cpu() + live_children_cpu()


def openssh(ssh_config: Path, hosts: list[str], forks: int, control_dir: Path | None = None) -> Timed:
    """`ssh NODE true` on every node, FORKS at a time; seconds = wall, cpu = children's CPU (ssh and proxies)."""
    argv = ["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes"]
    if control_dir is not None:
        argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/%C", "-o", "ControlPersist=300"]

    def one(host: str) -> int:
        return subprocess.run([*argv, host, "true"], capture_output=True, timeout=300, check=False).returncode

    cpu = children_cpu()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, forks)) as pool:
        codes = list(pool.map(one, hosts))
    seconds = time.perf_counter() - start
    failed = [h for h, code in zip(hosts, codes, strict=True) if code != 0]
    return Timed(argv, 1 if failed else 0, "", f"failed on {failed}" if failed else "", seconds, children_cpu() - cpu)


def close_masters(ssh_config: Path, hosts: list[str], control_dir: Path) -> None:
    """Stop the ControlMasters `openssh(..., control_dir)` left running."""
    def stop(host: str) -> None:
        subprocess.run(["ssh", "-F", str(ssh_config), "-o", f"ControlPath={control_dir}/%C", "-O", "exit", host],
                       capture_output=True, timeout=30, check=False)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(stop, hosts))


# ------------------------------------------------------------ paramiko (runs in its own process)


def _connect(config: Any, host: str) -> Any:
    import paramiko

    found = config.lookup(host)
    client = paramiko.SSHClient()
    known = found.get("userknownhostsfile", "~/.ssh/known_hosts").split()[0]
    client.load_host_keys(os.path.expanduser(known))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    sock = paramiko.ProxyCommand(found["proxycommand"]) if "proxycommand" in found else None
    client.connect(found.get("hostname", host), port=int(found.get("port", 22)), username=found.get("user"),
                   key_filename=found.get("identityfile"), look_for_keys=False, allow_agent=False, sock=sock,
                   timeout=30, banner_timeout=30, auth_timeout=30)
    return client


def _true(client: Any) -> int:
    _, stdout, _ = client.exec_command("true")
    return int(stdout.channel.recv_exit_status())


def paramiko_main(argv: list[str]) -> dict[str, Any]:
    """`paramiko[-warm] CONFIG FORKS NODE...`: cold: the measurement, as a dict; warm: JSON lines, one per round."""
    import paramiko

    mode, config_path, forks, hosts = argv[0], argv[1], int(argv[2]), argv[3:]
    config = paramiko.SSHConfig.from_path(config_path)
    pool = ThreadPoolExecutor(max_workers=max(1, forks))
    if mode == "paramiko":
        def cold(host: str) -> int:
            client = _connect(config, host)
            try:
                return _true(client)
            finally:
                client.close()

        start = time.perf_counter()
        codes = list(pool.map(cold, hosts))
        return {"inner_s": time.perf_counter() - start, "failed": [h for h, c in zip(hosts, codes, strict=True) if c]}
    clients = list(pool.map(lambda h: _connect(config, h), hosts))
    print(json.dumps({"connected": len(clients)}), flush=True)
    out: dict[str, Any] = {}
    for _ in sys.stdin:  # one round per line read; EOF ends
        cpu, start = self_cpu(), time.perf_counter()
        codes = list(pool.map(_true, clients))
        print(json.dumps({"wall_s": time.perf_counter() - start, "cpu_s": self_cpu() - cpu,
                          "failed": [h for h, c in zip(hosts, codes, strict=True) if c]}), flush=True)
    for client in clients:
        client.close()
    return out


if __name__ == "__main__":
    result = paramiko_main(sys.argv[1:])
    if result:
        print(json.dumps(result))
