"""Issue 43 item 3: `packages:`, `kernel:`, `rollout.upgrade`, overlays and promotion.yaml get the checks the old
sections have at validate, each refused at file:line with its key path, and no traceback reaches the CLI.

Real files in temporary directories; `reconciler validate` run as a subprocess where the CLI's own output is the
point (exit status, the error line, no traceback). The base state (tests/drivers/base_state.py): ctl (controller,
login), gpu[01-02] (compute, in Slurm), cpu01 (not in Slurm); the entries under test are files.yaml from line 1.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.desired.loader import DesiredStateError, load_dir
from tests.desired.cluster_repo import two_cluster_repo
from tests.desired_fixtures import REPO
from tests.drivers.base_state import write_state

ERROR = re.compile(r"^error: (?:\[cluster \S+\] )?(?P<where>[\w./-]+:\d+:\d+): (?P<path>\S+): (?P<msg>.*)$")


def _state(tmp_path: Path, desired: str) -> Path:
    """The base state plus DESIRED (files.yaml); a `cluster:` there replaces the base's."""
    root = write_state(tmp_path / "repo", desired)
    if desired.startswith("cluster:") or "\ncluster:" in desired:
        (root / "cluster.yaml").unlink()
    return root


def errors(tmp_path: Path, desired: str) -> list[str]:
    """`FILE:LINE:COL KEY.PATH: message` of every error the load of the base state plus DESIRED raises."""
    with pytest.raises(DesiredStateError) as info:
        load_dir(_state(tmp_path, desired))
    return [f"{e.location} {e.key_path()}: {e.message}" if e.location else str(e) for e in info.value.errors]


def loads(tmp_path: Path, desired: str) -> None:
    """The base state plus DESIRED loads (nothing refused)."""
    load_dir(_state(tmp_path, desired))


def validate(root: Path) -> list[tuple[str, str, str]]:
    """`reconciler validate ROOT` as a user runs it: exit 1, no traceback; its errors as (file:line:col, key path,
    message)."""
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(root)], capture_output=True,
                          text=True, timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return [(m["where"], m["path"], m["msg"]) for line in proc.stderr.splitlines() if (m := ERROR.match(line))]


# ---- packages: the inventory, and one wish per package and node ----------------------------------------------

def test_a_package_entry_naming_an_unknown_node_is_refused_by_validate(tmp_path: Path) -> None:
    root = write_state(tmp_path / "repo", 'packages:\n  - nodes: "gpu[01-04]"\n    packages: {hello: present}\n')
    assert validate(root) == [("files.yaml:2:5", "packages[0].nodes", "unknown nodes: gpu[03-04]")]


def test_two_package_entries_wanting_different_things_on_one_node_are_refused(tmp_path: Path) -> None:
    got = errors(tmp_path, 'packages:\n'
                           '  - nodes: gpu01\n    packages: {tzdata: present, hello: present}\n'
                           '  - roles: [compute]\n    packages: {tzdata: "2026b-0+deb12u1", hello: present}\n'
                           '  - nodes: cpu01\n    packages: {tzdata: absent}\n')
    assert got == ["files.yaml:5:16 packages[1].packages.tzdata: tzdata on node gpu01 is 'present' in packages[0] "
                   "and '2026b-0+deb12u1' here: one package, one wish per node (the plan would refuse the node's "
                   "whole package transaction)"]


def test_one_version_with_and_without_allow_downgrade_on_one_node_is_refused(tmp_path: Path) -> None:
    got = errors(tmp_path, 'packages:\n'
                           '  - {roles: [compute], allow_downgrade: true, packages: {tzdata: "2026a-1"}}\n'
                           '  - {nodes: gpu02, packages: {tzdata: "2026a-1"}}\n')
    assert len(got) == 1 and got[0].startswith(
        "files.yaml:3:31 packages[1].packages.tzdata: tzdata on node gpu02 is '2026a-1, allow_downgrade: true' in "
        "packages[0] and '2026a-1' here"), got
    loads(tmp_path / "same", 'packages:\n  - {roles: [compute], packages: {tzdata: "2026a-1"}}\n'
                             '  - {nodes: gpu02, packages: {tzdata: "2026a-1"}}\n')


# ---- rollout.upgrade names what exists and is used -----------------------------------------------------------

RELOAD_PACKAGES = ('packages:\n  - roles: [compute]\n    packages:\n'
                   '      nvidia-driver-standin: {version: "570.86.15-1", needs: driver-reload}\n')
UPGRADE_PACKAGES = RELOAD_PACKAGES.replace("driver-reload", "reboot")


@pytest.mark.parametrize(("upgrade", "where", "says"), [
    ("{driver_package: nvidia-drver-standin}", "rollout.upgrade.driver_package",
     "driver_package 'nvidia-drver-standin' is in no packages: entry: the gpu gate would find it not installed and "
     "fail every upgraded node (did you mean nvidia-driver-standin?)"),
    ("{driver_package: nvidia-driver-standin, gates: [smoke]}", "rollout.upgrade.driver_package",
     "the gpu gate compares the loaded driver with driver_package's installed version, and gates has no gpu"),
    ("{dcgm_level: 3}", "rollout.upgrade.dcgm_level", "dcgm_level is the dcgm gate's level, and gates has no dcgm"),
])
def test_rollout_upgrade_names_a_managed_package_and_gates_it_uses(tmp_path: Path, upgrade: str, where: str,
                                                                   says: str) -> None:
    got = errors(tmp_path, UPGRADE_PACKAGES + f"rollout:\n  upgrade: {upgrade}\n")
    assert len(got) == 1 and got[0].startswith("files.yaml:6:") and f" {where}: {says}" in got[0], got


@pytest.mark.parametrize(("gates", "at", "says"), [
    ("[gpu, nhc, gpu]", "gpu]", "rollout.upgrade.gates[2]: gate gpu is listed twice (first at gates[0])"),
    ("[gpu, {command: /opt/a/check-ib}, {command: /opt/b/check-ib --port 2}]", "{command: /opt/b",
     "rollout.upgrade.gates[2]: gate command:check-ib is listed twice (first at gates[1]); tell command gates "
     "apart with `name:`"),
    ("[gpu, nhcc]", "nhcc", "rollout.upgrade.gates[1]: unknown gate 'nhcc': one of gpu, dcgm, smoke, nhc, or "
                            "a site's check as {command: ..., name: ..., timeout: ...}"),
    ("[{command: x, timeout: 2h}]", "timeout", "rollout.upgrade.gates[0].timeout: must be at most 1h (allowed "
                                          "1s to 1h), got '2h'"),
    ("[{command: x, tiemout: 1m}]", "tiemout", "rollout.upgrade.gates[0].tiemout: unknown key (not "
                                               "allowed here) (did you mean timeout?)"),
    ("[{command: ''}]", "command", "rollout.upgrade.gates[0].command: String should have at least 1 character (got '')"),
    ("[{command: x, name: '--all'}]", "name", "rollout.upgrade.gates[0].name: String should match pattern "
                                                 "'^[A-Za-z0-9_][A-Za-z0-9_.@:+-]{0,127}$' (got '--all')"),
])
def test_the_gates_of_an_upgrade_are_known_once_each_and_in_bounds(tmp_path: Path, gates: str, at: str,
                                                                   says: str) -> None:
    """Refused at the item's (or its key's) own line and column, with its key path."""
    line = f"rollout: {{upgrade: {{max_unavailable: 1, gates: {gates}}}}}"
    assert errors(tmp_path, line + "\n") == [f"files.yaml:1:{line.rindex(at) + 1} {says}"]


def test_nhc_timeout_without_the_nhc_gate_is_refused_and_with_it_loads(tmp_path: Path) -> None:
    assert errors(tmp_path, "rollout:\n  upgrade:\n    gates: [gpu]\n    nhc_timeout: 10m\n") == [
        "files.yaml:4:5 rollout.upgrade.nhc_timeout: nhc_timeout is the nhc gate's watchdog, and gates has no nhc: "
        "add nhc or drop nhc_timeout"]
    loads(tmp_path / "ok", "rollout:\n  upgrade:\n    gates: [gpu, nhc, {command: 'ibstat | grep -q Active', "
                           "name: ib, timeout: 30s}, smoke]\n    nhc_timeout: 10m\n")


@pytest.mark.parametrize(("window", "at", "says"), [
    ("{days: [mon, fry], start: '22:00', end: '06:00'}", "days", "rollout.windows[0].days: unknown day 'fry': one "
     "of mon, tue, wed, thu, fri, sat, sun, or a range like mon-fri"),
    ("{start: '25:00', end: '06:00'}", "start", "rollout.windows[0].start: a time is HH:MM on a 24-hour clock "
     "(00:00 to 24:00), got '25:00'"),
    ("{start: '22:00', end: '22:00'}", "{start", "rollout.windows[0]: start and end are both 22:00: a window of no "
     "time (or of a whole day: write 00:00 to 24:00)"),
    ("{start: '22:00', end: '06:00', timezone: europe/berlin}", "timezone", "rollout.windows[0].timezone: unknown "
     "time zone 'europe/berlin': an IANA name like Europe/Berlin or UTC (did you mean Europe/Berlin?)"),
    ("{start: '22:00', end: '06:00', zone: UTC}", "zone", "rollout.windows[0].zone: unknown key (not allowed here) "
     "(did you mean timezone?)"),
    ("{days: [sat, sat-sun], start: '00:00', end: '24:00'}", "days", "rollout.windows[0].days: a day is listed "
     "twice in ['sat', 'sat-sun']"),
])
def test_a_maintenance_window_is_checked_at_its_line(tmp_path: Path, window: str, at: str, says: str) -> None:
    line = f"rollout: {{windows: [{window}]}}"
    assert errors(tmp_path, line + "\n") == [f"files.yaml:1:{line.index(at) + 1} {says}"]


def test_windows_apply_to_without_windows_and_a_window_twice_are_refused(tmp_path: Path) -> None:
    assert errors(tmp_path, "rollout:\n  windows_apply_to: all\n") == [
        "files.yaml:2:3 rollout.windows_apply_to: windows_apply_to says what rollout.windows hold, and there are no "
        "windows: add windows or drop windows_apply_to"]
    twice = "rollout:\n  windows:\n    - {days: mon-fri, start: '22:00', end: '06:00'}\n" \
            "    - {days: [mon, tue, wed, thu, fri], start: '22:00', end: '06:00', timezone: UTC}\n"
    assert errors(tmp_path / "twice", twice) == [
        "files.yaml:4:7 rollout.windows[1]: the same window as windows[0] (mon,tue,wed,thu,fri 22:00-06:00 UTC)"]
    loads(tmp_path / "ok", "rollout:\n  windows_apply_to: all\n  windows:\n    - {days: [sat, sun], start: "
                           "'00:00', end: '24:00', timezone: Europe/Berlin}\n    - {start: '22:00', end: '06:00'}\n")


@pytest.mark.parametrize(("upgrade", "at", "says"), [
    ("{max_unavailable: 0%}", "max_unavailable", "rollout.upgrade.max_unavailable: a percentage is 1% to 100%, got "
                                                 "'0%'"),
    ("{max_unavailable: half}", "max_unavailable", "rollout.upgrade.max_unavailable: a count or a percentage like "
                                                   "'50%', got 'half'"),
    ("{min_available: {debgu: 75%}}", "debgu", "rollout.upgrade.min_available.debgu: no partition 'debgu' in "
                                               "cluster.partitions (did you mean debug?)"),
    ("{min_available: {debug: 3}}", "debug", "rollout.upgrade.min_available.debug: min_available 3 of partition "
                                             "debug, which has 2 node(s): no node of it could ever go out"),
    ("{min_available: {debug: 101%}}", "debug", "rollout.upgrade.min_available.debug: a percentage is 1% to 100%, "
                                              "got '101%'"),
    ("{requeue: [debug, preemptibel]}", "preemptibel", "rollout.upgrade.requeue[1]: no partition 'preemptibel' in "
                                                       "cluster.partitions (there: debug)"),
    ("{requeue: [debug, debug]}", "debug]", "rollout.upgrade.requeue[1]: partition debug is listed twice"),
    ("{requeue: ['debug;reboot']}", "'debug", "rollout.upgrade.requeue[0]: String should match pattern "
                                              "'^[A-Za-z0-9_.-]+$' (got 'debug;reboot')"),
    ("{mode: reserve}", "mode", "rollout.upgrade.mode: Input should be 'drain' or 'reservation' (got 'reserve')"),
])
def test_capacity_is_a_count_or_a_percentage_of_partitions_that_exist(tmp_path: Path, upgrade: str, at: str,
                                                                     says: str) -> None:
    line = f"rollout: {{upgrade: {upgrade}}}"
    assert errors(tmp_path, line + "\n") == [f"files.yaml:1:{line.index(at) + 1} {says}"]


def test_a_driver_package_only_ever_removed_is_refused(tmp_path: Path) -> None:
    got = errors(tmp_path, 'packages:\n  - {roles: [compute], packages: {nvidia-driver-standin: absent}}\n'
                           'rollout:\n  upgrade:\n    driver_package: nvidia-driver-standin\n')
    assert got == ["files.yaml:5:5 rollout.upgrade.driver_package: driver_package 'nvidia-driver-standin' is "
                   "removed by every packages: entry naming it: the gpu gate would find it not installed and fail "
                   "every upgraded node"]


def test_the_driver_reload_loading_a_module_blacklisted_where_it_reloads_is_refused(tmp_path: Path) -> None:
    desired = RELOAD_PACKAGES + ('kernel:\n  modules:\n    - {nodes: gpu02, name: nvidia-uvm, state: blacklisted}\n'
                                  'rollout:\n  upgrade:\n    driver_reload:\n      modules: [nvidia_uvm, nvidia]\n')
    assert errors(tmp_path, desired) == [
        "files.yaml:11:17 rollout.upgrade.driver_reload.modules[0]: the driver reload loads nvidia_uvm, which "
        "kernel.modules[0] blacklists on gpu02 (where a change needs a driver reload): `modprobe` would fail "
        "there, after the unload"]
    loads(tmp_path / "elsewhere", desired.replace("nodes: gpu02", "nodes: cpu01"))  # cpu01 never reloads


def test_the_driver_reload_stopping_a_service_it_never_starts_is_refused(tmp_path: Path) -> None:
    desired = RELOAD_PACKAGES + ('rollout:\n  upgrade:\n    driver_reload:\n      stop: [nvidia-persistenced, '
                                  'nvidia-dcgm]\n      modules: [nvidia]\n      start: [nvidia-persistenced]\n')
    assert errors(tmp_path, desired) == [
        "files.yaml:8:35 rollout.upgrade.driver_reload.stop[1]: the driver reload stops nvidia-dcgm and never starts "
        "it again (not in start, and services: does not keep it running on every node whose changes need a driver "
        "reload): add it to start"]
    # services: keeps it running on every reloading node: the converge after the reload starts it
    loads(tmp_path / "kept", desired + "services:\n  - {roles: [compute], name: nvidia-dcgm.service}\n")


def test_the_driver_reload_starting_a_service_declared_stopped_is_refused(tmp_path: Path) -> None:
    desired = RELOAD_PACKAGES + ('services:\n  - {nodes: gpu01, name: nvidia-dcgm, state: stopped}\n'
                                  'rollout:\n  upgrade:\n    driver_reload: {modules: [nvidia], start: [nvidia-dcgm]}\n')
    assert errors(tmp_path, desired) == [
        "files.yaml:9:48 rollout.upgrade.driver_reload.start[0]: the driver reload starts nvidia-dcgm, which "
        "services[0] wants stopped on gpu01"]


def test_a_driver_reload_need_with_a_reload_that_does_nothing_is_refused(tmp_path: Path) -> None:
    got = errors(tmp_path, RELOAD_PACKAGES + "rollout:\n  upgrade: {max_unavailable: 2}\n")
    assert got == ["files.yaml:4:55 packages[0].packages.nvidia-driver-standin.needs: nvidia-driver-standin needs a "
                   "driver reload, and rollout.upgrade.driver_reload stops, unloads and starts nothing: the upgrade "
                   "would load nothing new (name the modules, e.g. modules: [nvidia_uvm, nvidia])"]
    loads(tmp_path / "held", RELOAD_PACKAGES)  # no rollout.upgrade: such changes are held, nothing is reloaded


# ---- what would cut the reconciler off from a node -----------------------------------------------------------

@pytest.mark.parametrize(("name", "ssh", "nodes"), [
    ("openssh-server", "", "cpu01,ctl,gpu[01-02]"),
    ("python3", "", "cpu01,ctl,gpu[01-02]"),
    ("python3.11-minimal", "", "cpu01,ctl,gpu[01-02]"),
    ("dnf", "", "cpu01,ctl,gpu[01-02]"),
    ("ifupdown", "", "cpu01,ctl,gpu[01-02]"),
    ("sudo", "ssh: {user: admin}\n", "cpu01,ctl,gpu[01-02]"),
    ("munge", "", "ctl,gpu[01-02]"),  # cpu01 is in no node set: it needs no munge
    ("munge", "cluster:\n  name: t\n  slurm_version: '23.11'\n  controllers: [ctl]\n  slurm_conf: {GresTypes: gpu, "
     "AuthType: auth/slurm}\n  node_sets: [{nodes: gpu01}]\n", "ctl,gpu01"),  # CredType is still cred/munge
    ("apt", 'nodes:\n  - {name: gpu09, package_manager: dnf, roles: [compute]}\n', "cpu01,ctl,gpu[01-02]"),
])
def test_removing_a_package_the_reconciler_needs_is_refused(tmp_path: Path, name: str, ssh: str, nodes: str) -> None:
    desired = f"packages:\n  - roles: [controller, compute]\n    nodes: cpu01\n    packages: {{{name}: absent}}\n"
    got = errors(tmp_path, desired + ssh)
    assert len(got) == 1 and got[0].startswith(
        f"files.yaml:4:16 packages[0].packages.{name}: removing {name} cuts the reconciler off from "
        f"{nodes}: "), got
    assert got[0].endswith("if that is meant, say so with allow_lockout: true on this entry"), got
    loads(tmp_path / "meant", desired.replace("    packages:", "    allow_lockout: true\n    packages:") + ssh)


@pytest.mark.parametrize("desired", [
    "packages:\n  - {roles: [compute], packages: {sudo: absent}}\n",  # the SSH user is root: no sudo
    "packages:\n  - {nodes: cpu01, packages: {munge: absent}}\n",  # not a Slurm node
    "packages:\n  - {roles: [compute], packages: {munge: absent}}\ncluster:\n  name: t\n  slurm_version: '23.11'\n"
    "  controllers: [ctl]\n  slurm_conf: {GresTypes: gpu, AuthType: auth/slurm, CredType: cred/slurm}\n"
    "  node_sets: [{nodes: gpu01}]\n",
    'packages:\n  - {nodes: cpu09, packages: {apt: absent}}\nnodes:\n  - {name: cpu09, package_manager: dnf}\n',
    'packages:\n  - {nodes: cpu09, packages: {rpm: absent}}\nnodes:\n  - {name: cpu09, package_manager: apt}\n',
    "packages:\n  - {roles: [compute], packages: {openssh-client: absent, python3-numpy: absent}}\n",
])
def test_removing_what_the_reconciler_does_not_need_there_is_not_refused(tmp_path: Path, desired: str) -> None:
    loads(tmp_path, desired)


def test_removing_openssh_server_is_refused_by_validate_with_no_traceback(tmp_path: Path) -> None:
    root = write_state(tmp_path / "repo", "packages:\n  - nodes: gpu01\n    packages:\n      openssh-server: absent\n")
    assert validate(root) == [(
        "files.yaml:4:7", "packages[0].packages.openssh-server", "removing openssh-server cuts the reconciler off "
        "from gpu01: sshd: the reconciler reaches every node over SSH; if that is meant, say so with allow_lockout: "
        "true on this entry")]


def test_blacklisting_a_network_module_is_refused_unless_meant(tmp_path: Path) -> None:
    desired = "kernel:\n  modules:\n    - nodes: gpu01\n      name: mlx5_core\n      state: blacklisted\n"
    root = write_state(tmp_path / "repo", desired)
    [(where, path, message)] = validate(root)
    assert (where, path) == ("files.yaml:5:7", "kernel.modules[0].state")
    assert message.startswith("blacklisting mlx5_core cuts the reconciler off from gpu01: it carries the network")
    loads(tmp_path / "meant", desired + "      allow_lockout: true\n")
    loads(tmp_path / "loaded", desired.replace("blacklisted", "loaded"))


IPV6_NODE = 'nodes:\n  - {name: gpu03, host: "fd00::3", roles: [compute]}\n'


@pytest.mark.parametrize(("values", "where", "nodes", "says"), [
    ("{net.ipv4.conf.all.arp_ignore: 8}", "net.ipv4.conf.all.arp_ignore", "gpu[01-03]",
     "arp_ignore 8 answers no ARP request for any local address"),
    ("{net.ipv4.conf.eth0.arp_ignore: '8'}", "net.ipv4.conf.eth0.arp_ignore", "gpu[01-03]", "arp_ignore 8"),
    ("{kernel.modules_disabled: 1}", "kernel.modules_disabled", "gpu[01-03]", "forbids loading any module"),
    ("{net.ipv6.conf.all.disable_ipv6: 1}", "net.ipv6.conf.all.disable_ipv6", "gpu03",
     "the reconciler reaches this node by its IPv6 address"),
])
def test_a_sysctl_that_cuts_the_node_off_is_refused(tmp_path: Path, values: str, where: str, nodes: str,
                                                    says: str) -> None:
    got = errors(tmp_path, IPV6_NODE + f"kernel:\n  sysctls:\n    - roles: [compute]\n      values: {values}\n")
    assert len(got) == 1 and got[0].startswith("files.yaml:6:") and \
        f" kernel.sysctls[0].values.{where}: " in got[0] and f"cuts the reconciler off from {nodes}: " in got[0] \
        and says in got[0], got


def test_harmless_sysctls_and_ipv6_off_where_the_node_is_reached_over_ipv4_load(tmp_path: Path) -> None:
    loads(tmp_path, "kernel:\n  sysctls:\n    - roles: [compute]\n      values: {net.ipv6.conf.all.disable_ipv6: 1, "
                    "net.ipv4.conf.all.arp_ignore: 1, kernel.modules_disabled: 0}\n")


@pytest.mark.parametrize(("service", "where", "says"), [
    ("{nodes: gpu01, name: sshd, state: stopped}", "services[0].state", "stopping sshd cuts the reconciler off"),
    ("{nodes: gpu01, name: ssh.service, enabled: false}", "services[0].enabled", "disabling ssh.service cuts"),
    ("{roles: [compute], name: munge, state: stopped}", "services[0].state", "stopping munge cuts the reconciler "
     "off from gpu[01-02]: munge: Slurm authenticates with it"),
    ("{nodes: gpu01, name: networking, state: stopped}", "services[0].state", "stopping networking cuts"),
])
def test_stopping_a_service_the_reconciler_needs_is_refused(tmp_path: Path, service: str, where: str,
                                                            says: str) -> None:
    got = errors(tmp_path, f"services:\n  - {service}\n")
    assert len(got) == 1 and got[0].startswith("files.yaml:2:") and f" {where}: {says}" in got[0], got
    loads(tmp_path / "meant", f"services:\n  - {service[:-1]}, allow_lockout: true}}\n")


@pytest.mark.parametrize(("path", "ssh"), [
    ("/etc/ssh/sshd_config", ""),
    ("/etc/ssh/ssh_host_ed25519_key", ""),
    ("/root/.ssh/authorized_keys", ""),
    ("/home/admin/.ssh/authorized_keys", "ssh: {user: admin}\n"),
    ("/etc/sudoers", "ssh: {user: admin}\n"),
])
def test_removing_a_file_the_reconciler_needs_is_refused(tmp_path: Path, path: str, ssh: str) -> None:
    desired = f"files:\n  - nodes: gpu01\n    path: {path}\n    state: absent\n"
    got = errors(tmp_path, desired + ssh)
    assert len(got) == 1 and got[0].startswith(
        f"files.yaml:4:5 files[0].state: removing {path} cuts the reconciler off from gpu01: "), got
    assert got[0].endswith("if that is meant, say so with allow_lockout: true on this entry")
    loads(tmp_path / "meant", desired + "    allow_lockout: true\n" + ssh)


def test_removing_another_users_keys_or_sudoers_for_root_is_not_refused(tmp_path: Path) -> None:
    loads(tmp_path, "files:\n  - {nodes: gpu01, path: /home/alice/.ssh/authorized_keys, state: absent}\n"
                    "  - {nodes: gpu01, path: /etc/sudoers, state: absent}\n")


# ---- overlays: cluster directories and names -----------------------------------------------------------------

def test_a_cluster_directory_no_command_can_name_is_refused(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path / "repo")
    shutil.copytree(root / "clusters" / "a", root / "clusters" / "new cluster")
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(root)], capture_output=True,
                          text=True, timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: (top level): clusters/new cluster/ is not a cluster name" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("not valid: new cluster"), proc.stderr


def test_two_clusters_with_one_cluster_name_are_refused(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path / "repo")
    (root / "clusters" / "b" / "cluster.yaml").write_text("cluster:\n  slurm_conf: {MaxJobCount: 5000}\n  name: a\n")
    assert validate(root) == [("clusters/b/cluster.yaml:3:3", "cluster.name", "cluster a has this name too ('a'): "
                               "Slurm's ClusterName and the reconciler's notifications tell clusters apart by it; "
                               "give each its own")]


def test_a_base_name_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path / "repo")
    shutil.copytree(root / "bases" / "common", root / "bases" / "common\n")
    (root / "clusters" / "a" / "overlay.yaml").write_text('bases: ["common\\n"]\n')
    got = validate(root)
    assert got[0] == ("clusters/a/overlay.yaml:1:9", "bases[0]", "'common\\n' is not a base name: a directory name "
                      "under bases/ (letters, digits, '_', '.', '-'; no path)"), got


def test_a_base_no_overlay_names_is_a_warning(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path / "repo")
    shutil.copytree(root / "bases" / "common", root / "bases" / "h100")
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(root)], capture_output=True,
                          text=True, timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["warning: bases/h100/ is in no cluster's overlay.yaml: nothing reads it"]
    (root / "clusters" / "b" / "overlay.yaml").write_text("bases: [common, h100]\n")
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(root)], capture_output=True,
                          text=True, timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
