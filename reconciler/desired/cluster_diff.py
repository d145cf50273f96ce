"""Which clusters of a multi-cluster repository a change reaches: those whose merged desired state differs.

A cluster is compared by what it would apply, not by which files changed: the validated state (model_dump),
the text of every `source:` file and the ciphertext of every age-encrypted input. Moving a key from one file to
another (a `source:` path spelled from its new place), or a base change that every cluster overrides, touches
nothing. A cluster that does not load on either
side counts as touched unless it fails the same way on both.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from reconciler.desired.agesecrets import entries
from reconciler.desired.clusters import cluster_names, load_cluster
from reconciler.desired.errors import DesiredStateError, LoadedState
from reconciler.desired.loader import LoadLimits


def state_digest(loaded: LoadedState) -> str:
    """A sha256 of what a loaded state would apply: its model, its `source:` files' text, its ciphertexts."""
    state = loaded.state
    # a `source:` path counts by what it names (its text, its ciphertext), not how it is spelled
    doc = {"state": state.model_dump(mode="json", exclude={"files": {"__all__": {"source"}}}),
           "sources": [None if item.encrypted else item.text() for item in state.files],
           "encrypted": [[list(path), enc.sha256 if enc is not None else None] for path, _, enc in entries(state)]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _digest(root: Path, name: str, limits: LoadLimits | None) -> str:
    """`ok:` and the state's digest, or `invalid:` and a digest of its errors (paths relative to ROOT)."""
    try:
        return "ok:" + state_digest(load_cluster(root, name, limits=limits))
    except DesiredStateError as exc:
        text = "\n".join(str(e) for e in exc.errors).replace(str(root), ".")
        return "invalid:" + hashlib.sha256(text.encode()).hexdigest()


def touched_clusters(old_root: str | Path, new_root: str | Path,
                     limits: LoadLimits | None = None) -> dict[str, bool]:
    """For every cluster of the NEW tree, whether its merged desired state differs from the OLD tree's."""
    old, new = Path(old_root), Path(new_root)
    before = set(cluster_names(old))
    return {name: name not in before or _digest(old, name, limits) != _digest(new, name, limits)
            for name in cluster_names(new)}
