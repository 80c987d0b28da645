"""`modelplane`: a command line for pipelines over the platform's REST API (/api/v1/).

It talks HTTP only (token auth) and never imports Django or the control plane: it runs
anywhere `requests` and `click` install. Exit codes are in `modelplane_cli.exits`."""

__version__ = "0.1.0"
