"""A desired-state directory read and checked: YAML with line numbers, merging, validation, inventory, secrets."""
