"""Command groups; each module exports COMMANDS for modelplane_cli.main to add."""
