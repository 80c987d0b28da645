from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"

    def ready(self):
        from deployments.rollout_verdicts import register_verdict_source
        from monitoring.selectors.alerts import rollout_verdicts

        register_verdict_source(rollout_verdicts)
