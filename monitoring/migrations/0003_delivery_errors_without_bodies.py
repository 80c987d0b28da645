"""Delivery rows kept up to 300 bytes of the receiver's response body in `error`
("HTTP 404: <body>"), which turned webhooks into a port scanner: keep the
status only. New rows never hold a body (kernel.outbound never reads it)."""

import re

from django.db import migrations

BODY = re.compile(r"^(HTTP \d{3}):.*$", re.S)


def drop_bodies(apps, schema_editor):
    Delivery = apps.get_model("monitoring", "NotificationDelivery")
    for row in Delivery.objects.filter(error__regex=r"^HTTP [0-9]{3}:").only("pk", "error").iterator():
        Delivery.objects.filter(pk=row.pk).update(error=BODY.sub(r"\1", row.error))


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0002_scrapestate_failing_since")]
    operations = [migrations.RunPython(drop_bodies, migrations.RunPython.noop)]
