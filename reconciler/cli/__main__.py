"""`python -m reconciler.cli`: the console script."""

from reconciler.cli import main

main()
