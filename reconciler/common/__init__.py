"""Building blocks that import nothing of the project: hostlists, versions, the clock, isolation, failpoints."""
