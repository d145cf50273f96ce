"""Every field that reaches OpenSSH, paramiko or a path as a name is checked (issue 22), over generated strings.

For random strings (shell metacharacters, option dashes, spaces, slashes, dots, quotes, non-ASCII) put into each
connection field and each node-name field of a valid desired state, the loader either refuses the value with
file:line at that key, or the value is inert: it does not start with '-', holds nothing a shell or ssh_config
token would read (`shlex.quote` leaves it as is), and a node name holds no '/' and no '..'.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.importer.sources import parse_ssh_url
from reconciler.model import netnames
from tests.engine.testbed_state import write_state

NASTY = list("-;|&$`()<>'\" \t*?[]{}~!#%\\/.,:@=+_^") + ["..", "-o", "\u00e9", "\u2028", "\x00", "\n"]
HOSTILE = st.lists(st.one_of(st.sampled_from(NASTY), st.text("abcXYZ019", min_size=1, max_size=3)),
                   min_size=1, max_size=8).map("".join)
OPTION = "-oProxyCommand=touch /tmp/pwned"


def _state(root: Path) -> Path:
    return write_state(root / "desired", name="fields", state_dir=root, subnet="10.98.0", computes="gpu[01-02]")


def _edit_inventory(desired: Path, edit: Callable[[str], str]) -> None:
    path = desired / "nodes.yaml"
    path.write_text(edit(path.read_text()))


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") \
        .replace("\x00", "\\0").replace("\u2028", "\\L") + '"'


# (where the value goes in nodes.yaml, the key path its error must name)
FIELDS: dict[str, tuple[Callable[[str, str], str], str]] = {
    "ssh.user": (lambda text, v: text.replace("ssh:\n", f"ssh:\n  user: {v}\n", 1), "ssh.user"),
    "ssh.proxy_jump": (lambda text, v: text.replace("ssh:\n", f"ssh:\n  proxy_jump: {v}\n", 1), "ssh.proxy_jump"),
    "ssh.identity_file": (lambda text, v: text.replace("ssh:\n", f"ssh:\n  identity_file: {v}\n", 1),
                          "ssh.identity_file"),
    "ssh.known_hosts": (lambda text, v: text.replace("ssh:\n", f"ssh:\n  known_hosts: {v}\n", 1), "ssh.known_hosts"),
    "ssh.gateways.name": (lambda text, v: text.replace("ssh:\n", f"ssh:\n  gateways:\n    - name: {v}\n"
                                                       "      nodes: gpu02\n", 1), "ssh.gateways[0].name"),
    "nodes.host": (lambda text, v: text.replace("nodes:\n", f"nodes:\n  - name: extra01\n    host: {v}\n", 1),
                   "nodes[0].host"),
    "nodes.user": (lambda text, v: text.replace("nodes:\n", f"nodes:\n  - name: extra01\n    user: {v}\n", 1),
                   "nodes[0].user"),
    "nodes.proxy_jump": (lambda text, v: text.replace("nodes:\n", f"nodes:\n  - name: extra01\n    proxy_jump: "
                                                      f"{v}\n", 1), "nodes[0].proxy_jump"),
    "nodes.name": (lambda text, v: text.replace("nodes:\n", f"nodes:\n  - name: {v}\n", 1), "nodes[0].name"),
}


# Fields that reach a shell or a path on the nodes, in a file of their own (zz-extra.yaml).
EXTRA: dict[str, tuple[Callable[[str], str], str, Callable[[str], bool]]] = {
    "files.path": (lambda v: f"files:\n  - path: {v}\n    nodes: gpu01\n    content: x\n", "files[0].path",
                   lambda v: v.startswith("/") and ".." not in v.split("/") and "//" not in v
                   and not any(ord(c) < 32 for c in v)),
    "files.owner": (lambda v: f"files:\n  - path: /etc/x\n    nodes: gpu01\n    owner: {v}\n    content: x\n",
                    "files[0].owner", lambda v: _inert(v)),
    "services.name": (lambda v: f"services:\n  - name: {v}\n    nodes: gpu01\n", "services[0].name",
                      lambda v: _inert(v)),
    "images.import_on": (lambda v: f"images:\n  - path: /srv/shared/images/x.sqsh\n    import_on: {v}\n",
                         "images[1].import_on", lambda v: _inert(v)),
    # the sections of issue 37/43: names that reach apt/dnf, modprobe, modprobe.d and sysctl.d lines
    "packages.name": (lambda v: f"packages:\n  - nodes: gpu01\n    packages: {{{v}: present}}\n",
                      "packages[0].packages", lambda v: _inert(v)),
    "kernel.modules.name": (lambda v: f"kernel:\n  modules:\n    - nodes: gpu01\n      name: {v}\n",
                            "kernel.modules[0].name", lambda v: _inert(v) and "/" not in v and "." not in v),
    "kernel.modules.options key": (lambda v: f"kernel:\n  modules:\n    - nodes: gpu01\n      name: nv\n"
                                   f"      options: {{{v}: '1'}}\n", "kernel.modules[0].options",
                                   lambda v: _inert(v) and "=" not in v),
    "kernel.modules.options value": (lambda v: f"kernel:\n  modules:\n    - nodes: gpu01\n      name: nv\n"
                                     f"      options: {{k: {v}}}\n", "kernel.modules[0].options",
                                     lambda v: shlex.quote(v) == v and "=" not in v),
    "kernel.sysctls key": (lambda v: f"kernel:\n  sysctls:\n    - nodes: gpu01\n      values: {{{v}: '1'}}\n",
                           "kernel.sysctls[0].values", lambda v: _inert(v) and "/" not in v and ".." not in v),
    "kernel.sysctls value": (lambda v: f"kernel:\n  sysctls:\n    - nodes: gpu01\n      values: {{net.core.x: {v}}}\n",
                             "kernel.sysctls[0].values", lambda v: not any(c in v for c in "=#\\'\"")
                             and all(c.isprintable() or c == "\t" for c in v)),
}

# rollout.upgrade's names (a package, services, modules: run by the upgrade machine), appended to rollout.yaml;
# the value is also a package of packages: and started again, so that only its own rules can refuse it.
UPGRADE: dict[str, tuple[Callable[[str], str], str]] = {
    "driver_package": (lambda v: f"    driver_package: {v}\n", "rollout.upgrade.driver_package"),
    "driver_reload.modules": (lambda v: f"    driver_reload: {{modules: [{v}]}}\n",
                              "rollout.upgrade.driver_reload.modules"),
    "driver_reload.stop": (lambda v: f"    driver_reload: {{stop: [{v}], start: [{v}]}}\n",
                           "rollout.upgrade.driver_reload.stop"),
}


@pytest.mark.parametrize("field", sorted(EXTRA))
@given(value=HOSTILE)
def test_shell_and_path_fields_are_refused_or_inert(base: Path, field: str, value: str) -> None:
    """Generated strings in fields that reach a shell or a path: refused at their file:line, or safe there."""
    put, key_path, safe = EXTRA[field]
    with tempfile.TemporaryDirectory() as tmp:
        desired = Path(tmp) / "d"
        shutil.copytree(base, desired)
        (desired / "zz-extra.yaml").write_text(put(_quoted(value)))
        try:
            load_dir(desired)
        except DesiredStateError as exc:
            if any(e.key_path().startswith(key_path) and e.location is not None
                   and e.location.file == "zz-extra.yaml" for e in exc.errors):
                return
            accepted_here = not any(e.key_path().startswith(key_path) for e in exc.errors)
            assert accepted_here, [str(e) for e in exc.errors]
        assert safe(value), f"{field}: {value!r} accepted"


@pytest.mark.parametrize("field", sorted(UPGRADE))
@given(value=HOSTILE)
def test_rollout_upgrade_names_are_refused_or_inert(base: Path, field: str, value: str) -> None:
    """Generated strings in rollout.upgrade's names: refused at their file:line, or inert."""
    put, key_path = UPGRADE[field]
    with tempfile.TemporaryDirectory() as tmp:
        desired = Path(tmp) / "d"
        shutil.copytree(base, desired)
        rollout = desired / "rollout.yaml"
        rollout.write_text(rollout.read_text() + "  upgrade:\n" + put(_quoted(value)))
        (desired / "zz-extra.yaml").write_text(f"packages:\n  - nodes: gpu01\n    packages: {{{_quoted(value)}: "
                                               "present}\n")
        try:
            load_dir(desired)
        except DesiredStateError as exc:
            if any(e.key_path().startswith(key_path) and e.location is not None and e.location.file == "rollout.yaml"
                   for e in exc.errors):
                return
        assert _inert(value), f"{field}: {value!r} accepted"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid desired state (its inventory has `ssh:` and `nodes:` keys to edit)."""
    desired = _state(tmp_path_factory.mktemp("fields"))
    text = (desired / "nodes.yaml").read_text()
    assert "ssh:\n" in text and "nodes:\n" in text
    load_dir(desired)
    return desired


def _load_with(base: Path, field: str, value: str) -> list[str] | None:
    """Errors at the field's key path ([] when others only), or None when the state loads."""
    put, key_path = FIELDS[field]
    with tempfile.TemporaryDirectory() as tmp:
        desired = Path(tmp) / "d"
        desired.mkdir()
        for file in base.iterdir():
            if file.is_file():
                (desired / file.name).write_text(file.read_text())
        _edit_inventory(desired, lambda text: put(text, _quoted(value)))
        try:
            load_dir(desired)
        except DesiredStateError as exc:
            return [str(e) for e in exc.errors if e.key_path() == key_path and e.location is not None]
        return None


def _inert(value: str) -> bool:
    return not value.startswith("-") and shlex.quote(value) == value


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_an_option_is_refused_with_file_line(base: Path, field: str) -> None:
    """`-oProxyCommand=...` (an option to OpenSSH, a command to run) is refused in every connection field."""
    errors = _load_with(base, field, OPTION)
    assert errors, f"{field}: {OPTION!r} was accepted"
    assert errors[0].startswith("nodes.yaml:")


@pytest.mark.parametrize("field", sorted(FIELDS))
@given(value=HOSTILE)
def test_generated_values_are_refused_or_inert(base: Path, field: str, value: str) -> None:
    """Generated strings: refused at the field's file:line, or inert (no option, no shell or path syntax)."""
    errors = _load_with(base, field, value)
    if errors is None or not errors:
        if field == "ssh.identity_file" or field == "ssh.known_hosts":
            assert not value.startswith("-") and not any(ord(c) < 32 for c in value)
        elif field == "nodes.name":
            assert "/" not in value and ".." not in value
        elif errors is None:
            assert _inert(value), f"{field}: {value!r} accepted"


@given(HOSTILE)
def test_name_rules_agree_with_shell_safety(value: str) -> None:
    """Whatever the name rules accept is inert; nodes' names also have no '/' or '..'."""
    for rule in (netnames.host, netnames.user, netnames.node_name, netnames.proxy_jump):
        try:
            rule(value)
        except ValueError:
            continue
        assert _inert(value) or rule is netnames.host and value.startswith("[")
        if rule is netnames.node_name:
            assert "/" not in value and ".." not in value and len(value) <= netnames.MAX_NODE_NAME


@given(HOSTILE, HOSTILE)
def test_import_ssh_url_parts_are_checked(user: str, host: str) -> None:
    """`reconciler import ssh://USER@HOST`: a user or host that is not a name is refused before connecting."""
    try:
        target = parse_ssh_url(f"ssh://{user}@{host}:22/")
    except ValueError:
        return
    assert target is not None and _inert(target.host) and (target.user is None or _inert(target.user))


def test_valid_forms_are_kept() -> None:
    """Real forms pass: FQDNs, IPs, IPv6, aliases with '_', bastion chains, `none`."""
    for value in ("gpu01", "gpu01.cluster.example.com", "10.0.0.5", "fe80::1", "[fe80::1]", "login_alias"):
        assert netnames.host(value) == value
    assert netnames.proxy_jump("admin@bastion.example.com:2222,jump2") == "admin@bastion.example.com:2222,jump2"
    assert netnames.proxy_jump("none") == "none"
    assert netnames.user("slurm-admin") == "slurm-admin"
    assert netnames.node_name("dgx-a100_01.rack1") == "dgx-a100_01.rack1"
    for bad in ("../etc", "a/b", "a..b", "-gpu", "gpu 1", "a" * 65):
        with pytest.raises(ValueError):
            netnames.node_name(bad)
