# Beat's lease: exactly one Celery beat sends the periodic tasks.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("config", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="SchedulerLease",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=64, unique=True)),
                ("holder", models.CharField(max_length=200)),
                ("expires_at", models.DateTimeField()),
            ],
        ),
    ]
