"""The GitOps daemon: follow a Git branch (or a local directory) and reconcile the cluster continuously."""
