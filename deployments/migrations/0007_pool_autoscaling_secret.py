# Pools that scale: what the HPA scales on, and the Secret with the object store's credentials.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0006_fair_baseline_on_inconclusive"),
    ]

    operations = [
        migrations.AddField(
            model_name="servingpool",
            name="autoscale_metric",
            field=models.CharField(blank=True, max_length=24),
        ),
        migrations.AddField(
            model_name="servingpool",
            name="autoscale_target",
            field=models.FloatField(default=0),
        ),
        migrations.AddField(
            model_name="servingpool",
            name="repository_secret",
            field=models.CharField(blank=True, max_length=253),
        ),
    ]
