"""A provider secret is bound to the origins it may be sent to. A secret stored before the
binding existed is bound to the origins of the LLM versions that name it now (what it was
already sent to), so nothing that worked stops; a secret nothing names is bound to none
(it can be named by no backend until stored again)."""

from urllib.parse import urlsplit

from django.db import migrations, models


def _origin(url: str) -> str:
    parts = urlsplit(url)
    scheme, host, port = parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" if port is None or port == default else f"{scheme}://{host}:{port}"


def bind_to_current_users(apps, schema_editor):
    ProviderSecret = apps.get_model("registry", "ProviderSecret")
    LLMSpec = apps.get_model("registry", "LLMSpec")
    for secret in ProviderSecret.objects.all():
        urls = LLMSpec.objects.filter(secret=secret).values_list("base_url", flat=True)
        secret.origins = sorted({_origin(url) for url in urls if url})
        secret.save(update_fields=["origins"])


class Migration(migrations.Migration):
    dependencies = [("registry", "0008_llm_versions_and_secrets")]

    operations = [
        migrations.AddField(
            model_name="providersecret",
            name="origins",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Origins the value may be sent to (scheme://host[:port]), set when stored.",
            ),
        ),
        migrations.RunPython(bind_to_current_users, migrations.RunPython.noop),
    ]
