"""Managed files and services: which nodes an entry selects, its source file, its template variables."""

from __future__ import annotations

from pathlib import Path

from reconciler.common import hostlist
from reconciler.desired.agesecrets import MAX_SOURCE_BYTES, AgeError, read_encrypted  # the bound lives below us
from reconciler.desired.errors import KeyPath
from reconciler.desired.inventory import node_specs
from reconciler.model import DesiredState, ManagedFile, NodeSelection, template_fields


def selects(state: DesiredState, item: NodeSelection, node: str) -> bool:
    """True when the entry's hostlist names the node or the node has one of its roles."""
    if item.nodes is not None and node in hostlist.expand_set(item.nodes):
        return True
    spec = node_specs(state).get(node)
    return bool(item.roles) and spec is not None and bool(spec.roles & set(item.roles))


def selected(state: DesiredState, item: NodeSelection) -> list[str]:
    """The inventory nodes an entry selects, in inventory order (as `selects`, the hostlist expanded once)."""
    named = hostlist.expand_set(item.nodes) if item.nodes is not None else frozenset()
    wanted = set(item.roles)
    return [name for name, spec in node_specs(state).items() if name in named or spec.roles & wanted]


def template_values(state: DesiredState, node: str) -> dict[str, str]:
    """The variables of a templated file on a node (model.TEMPLATE_VARIABLES says what each is)."""
    spec = node_specs(state).get(node)
    return {"node": node, "host": spec.host if spec else node, "cluster": state.cluster.name,
            "controller": state.cluster.controller_names[0], "config_dir": state.cluster.config_dir,
            "roles": ",".join(sorted(spec.roles)) if spec else ""}


def render(state: DesiredState, item: ManagedFile, node: str) -> str | None:
    """The file's content on a node (templated when asked); None when its source was never read."""
    text = item.text()
    if text is None or not item.template:
        return text
    template_fields(text)  # checked at load; a model built by hand is checked here
    return text.format_map(template_values(state, node))


def read_sources(state: DesiredState, root: Path, yaml_file: dict[int, str]) -> list[tuple[KeyPath, str]]:
    """Read every `source:` of `files:` (relative to the directory of the YAML file that names it, inside
    ROOT; an `.age` one as ciphertext, not decrypted); return the problems as (key path, message).
    YAML_FILE maps a `files:` index to its YAML file, relative to ROOT."""
    problems: list[tuple[KeyPath, str]] = []
    top = root.resolve()
    for index, item in enumerate(state.files):
        if item.source is None:
            continue
        where: KeyPath = ("files", index, "source")
        base = (root / yaml_file.get(index, "x")).parent
        if Path(item.source).is_absolute():
            problems.append((where, f"source must be relative to the YAML file's directory, got {item.source!r}"))
            continue
        target = (base / item.source).resolve()
        if not target.is_relative_to(top):
            problems.append((where, f"source {item.source!r} is outside the desired-state repository"))
            continue
        if not target.is_file():
            problems.append((where, f"source {item.source!r}: no such file in the repository"))
            continue
        if item.encrypted:  # kept as ciphertext: decrypted on the login node only (agesecrets.unlock)
            try:
                item._age = read_encrypted(target, item.source)
            except AgeError as exc:
                problems.append((where, str(exc)))
            continue
        data = target.read_bytes()
        if len(data) > MAX_SOURCE_BYTES:
            problems.append((where, f"source {item.source!r} is larger than {MAX_SOURCE_BYTES} bytes"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            problems.append((where, f"source {item.source!r} is not UTF-8 text"))
            continue
        if item.template:
            try:
                template_fields(text)
            except ValueError as exc:
                problems.append((where, f"{item.source}: {exc}"))
                continue
        item._source_text = text
    return problems
