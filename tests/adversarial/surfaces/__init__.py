"""One module per area of the platform, each exporting `SURFACES` (see `tests/adversarial/registry.py`)."""
