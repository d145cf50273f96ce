"""Read a multi-cluster repository's `promotion.yaml`: which cluster takes a commit after which, and the soak.

    promotion:
      production: {after: staging, soak: 30m, approval: required, hold_after_rollback: true,
                   windows: [{days: mon-fri, start: "09:00", end: "17:00", timezone: Europe/Berlin}]}

Validated at file:line: `after` names another cluster of the repository, a cluster has one `after` (a mapping
key cannot repeat), and the chain of `after`s has no cycle. `windows` are the rollout's windows, the same type
(reconciler/model/windows.py): outside every one of them nothing new is promoted.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from reconciler.desired.errors import ConfigError, DesiredStateError, KeyPath, Location, nearest
from reconciler.desired.layout import cluster_names
from reconciler.desired.loader import parse_file, pydantic_errors
from reconciler.model import parse_duration
from reconciler.model.windows import Window

PROMOTION_FILE = "promotion.yaml"
MAX_SOAK = timedelta(days=7)


def _soak(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"a duration is needed here (e.g. 30m, 2h), got {value!r}")
    seconds = parse_duration(value)
    if not timedelta(0) <= timedelta(seconds=seconds) <= MAX_SOAK:
        raise ValueError(f"must be between 0s and 7d, got {value!r}")
    return timedelta(seconds=seconds)


class PromotionRule(BaseModel):
    """A cluster applies a commit only after cluster `after` applied it and stayed healthy for `soak`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after: str | list[str] = Field(description="The earlier cluster, or several: `[staging-a, staging-b]`")
    require: Literal["all", "any"] = Field(default="all", description="With several `after`s: all of them must "
                                           "promote a commit, or any one")
    soak: Annotated[timedelta, BeforeValidator(_soak)] = timedelta(0)
    approval: Literal["none", "required"] = Field(default="none", description="required: a commit is applied "
                                                  "only once `reconciler promote approve COMMIT` named it too")
    hold_after_rollback: bool = Field(default=True, description="When this cluster's own gates roll a promoted "
                                      "commit back, promote nothing more until `reconciler promote release`")
    windows: list[Window] = Field(default_factory=list, description="Promote only inside these windows (the "
                                  "rollout's window type; none: any time)")


    @property
    def upstreams(self) -> list[str]:
        """The earlier clusters, in the order written."""
        return [self.after] if isinstance(self.after, str) else list(self.after)

    @property
    def after_text(self) -> str:
        """`staging`, or `staging-a and staging-b` / `staging-a or staging-b` as `require` reads."""
        names = self.upstreams
        return names[0] if len(names) == 1 else f" {'or' if self.require == 'any' else 'and'} ".join(names)


class _PromotionFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    promotion: dict[str, PromotionRule] = {}


def read_promotion(root: str | Path, clusters: list[str] | None = None) -> dict[str, PromotionRule]:
    """The promotion rules of the repository at ROOT by cluster ({} without promotion.yaml); DesiredStateError
    with file:line when one is wrong. CLUSTERS: the repository's clusters (default: read from ROOT)."""
    root = Path(root)
    path = root / PROMOTION_FILE
    if not path.is_file():
        return {}
    errors: list[ConfigError] = []
    locations: dict[KeyPath, Location] = {}
    doc = parse_file(path, PROMOTION_FILE, errors, None, locations)
    if errors:
        raise DesiredStateError(errors)
    try:
        rules = _PromotionFile.model_validate(doc if doc is not None else {}).promotion
    except ValidationError as exc:
        raise DesiredStateError(pydantic_errors(exc, locations)) from None
    known = cluster_names(root) if clusters is None else clusters
    for name, rule in rules.items():
        if name not in known:
            errors.append(ConfigError(nearest(locations, ("promotion", name)), ("promotion", name),
                                      f"no cluster {name!r} in this repository (clusters: {', '.join(known)})"))
        if not rule.upstreams:
            where: KeyPath = ("promotion", name, "after")
            errors.append(ConfigError(nearest(locations, where), where, "after: names no cluster"))
        for index, upstream in enumerate(rule.upstreams):
            where = ("promotion", name, "after") if isinstance(rule.after, str) else ("promotion", name, "after", index)
            if upstream not in known:
                errors.append(ConfigError(nearest(locations, where), where, f"after: no cluster {upstream!r} in this "
                                          f"repository (clusters: {', '.join(known) or 'none'})"))
            elif upstream == name:
                errors.append(ConfigError(nearest(locations, where), where, "a cluster cannot come after itself"))
            elif upstream in rule.upstreams[:index]:
                errors.append(ConfigError(nearest(locations, where), where, f"after: {upstream} is named twice"))
    errors.extend(_cycles(rules, locations))
    if errors:
        raise DesiredStateError(errors)
    return rules


def _cycles(rules: dict[str, PromotionRule], locations: dict[KeyPath, Location]) -> list[ConfigError]:
    """One error per cycle of `after`s (a cluster waiting, through others, on itself), at its first member."""
    errors: list[ConfigError] = []
    reported: set[str] = set()

    def walk(chain: list[str]) -> list[str] | None:
        for upstream in rules[chain[-1]].upstreams if chain[-1] in rules else []:
            if upstream in chain:
                return chain[chain.index(upstream):]
            found = walk([*chain, upstream])
            if found:
                return found
        return None

    for start in sorted(rules):
        cycle = walk([start])
        if cycle and len(cycle) > 1 and not reported & set(cycle):
            reported |= set(cycle)
            where: KeyPath = ("promotion", cycle[0], "after")
            errors.append(ConfigError(nearest(locations, where), where, "promotion cycle: "
                                      + " -> ".join([*cycle, cycle[0]]) + " (each waits on the next)"))
    return errors
