"""Every read of the registry the API, the dashboard, the admin and other apps share, one
module per concern: teams.py (who sees what, and the team_scoped helper every app's
selectors use), events.py (the audit trail), catalog.py (models and versions) and
builds.py (builds and artifacts). Every list is team-scoped."""
