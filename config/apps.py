from django.apps import AppConfig


class ConfigConfig(AppConfig):
    """The project package doubles as an app for project-wide commands (run_platform)."""

    name = "config"
    verbose_name = "Platform"
