"""Generated parameter tables (JSON); see ../README.md."""
