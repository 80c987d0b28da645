"""Dashboard pages of deployments: serving pools (pools.py), endpoints and rollouts (rollouts.py)."""
