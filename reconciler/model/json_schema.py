"""JSON Schema of one desired-state YAML file, for editors."""

from __future__ import annotations

from typing import Any

from reconciler.model.state import DesiredState


def desired_state_json_schema() -> dict[str, Any]:
    """The schema of the merged desired state, with top-level keys optional (each file holds a few)."""
    schema = DesiredState.model_json_schema(by_alias=True)
    schema.pop("required", None)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "reconciler desired-state file"
    return schema
