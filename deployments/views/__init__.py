"""Dashboard pages of deployments: serving pools (pools.py), endpoints and rollouts (rollouts.py),
inference keys and endpoint access (keys.py), the release card (releases.py)."""
