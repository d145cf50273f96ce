"""Facts: what is on a node, gathered in one SSH round trip and parsed into typed values."""
