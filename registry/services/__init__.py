"""Every write to the registry, one module per concern: events.py (the audit trail every
app writes), teams.py (roles and teams), catalog.py (models and versions) and builds.py
(the artifact factory's builds)."""
