"""Progressive rollout: a commit reaches the nodes in waves, each gated by health, rolled back when a gate fails.

A layer above the engine (which plans and applies a desired state on a node set): `waves` splits a plan,
`gates` judges a wave, `runner` applies wave after wave and rolls back, `journal` survives a crash.
"""
