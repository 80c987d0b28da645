"""Event.action gets its vocabulary (registry.models.EventAction); a state change had three
names: rollouts wrote "transition", experiments "state_changed", everything else
"status_changed". Old rows take the one name; going back restores each by object type."""

from django.db import migrations, models

SYNONYMS = {"deployments.rollout": "transition", "experiments.experiment": "state_changed"}


def one_name(apps, schema_editor):
    Event = apps.get_model("registry", "Event")
    Event.objects.filter(action__in=set(SYNONYMS.values())).update(action="status_changed")


def two_names(apps, schema_editor):
    Event = apps.get_model("registry", "Event")
    for object_type, action in SYNONYMS.items():
        Event.objects.filter(object_type=object_type, action="status_changed").update(action=action)


class Migration(migrations.Migration):
    dependencies = [("registry", "0003_build_tune")]

    operations = [
        migrations.RunPython(one_name, two_names),
        migrations.AlterField(
            model_name="event",
            name="action",
            field=models.CharField(
                max_length=64,
                choices=[
                    ("created", "Created"),
                    ("updated", "Updated"),
                    ("deleted", "Deleted"),
                    ("status_changed", "Status Changed"),
                    ("role_set", "Role Set"),
                    ("data_attached", "Data Attached"),
                    ("data_removed", "Data Removed"),
                    ("redispatched", "Redispatched"),
                    ("access_changed", "Access Changed"),
                    ("revoked", "Revoked"),
                    ("scaled", "Scaled"),
                    ("delete_requested", "Delete Requested"),
                    ("delete_failed", "Delete Failed"),
                    ("model_load_requested", "Model Load Requested"),
                    ("model_loaded", "Model Loaded"),
                    ("model_load_failed", "Model Load Failed"),
                    ("model_reloaded", "Model Reloaded"),
                    ("model_reload_failed", "Model Reload Failed"),
                    ("model_drain_started", "Model Drain Started"),
                    ("model_unloaded", "Model Unloaded"),
                    ("model_unload_failed", "Model Unload Failed"),
                    ("replica_down", "Replica Down"),
                    ("replica_restarted", "Replica Restarted"),
                    ("replica_retiring", "Replica Retiring"),
                    ("stable_changed", "Stable Changed"),
                    ("baseline_unavailable", "Baseline Unavailable"),
                    ("alert_raised", "Alert Raised"),
                    ("alert_reopened", "Alert Reopened"),
                    ("alert_acknowledged", "Alert Acknowledged"),
                    ("alert_resolved", "Alert Resolved"),
                    ("channel_created", "Channel Created"),
                    ("channel_deleted", "Channel Deleted"),
                ],
            ),
        ),
    ]
