"""LLM versions through the API: an uploaded model directory (kind a) or a
backend reference (kind b), and the team's provider secrets they name.

Hostile uploads (path traversal, links, pickle weights, a context length past the model's)
are refused with a 400 naming the problem and leave nothing stored; another team's secret
reads as an unknown one; a secret's value is in its create reply and nowhere else (not in
lists, details, the audit trail or the database row)."""

import io
import json
import tarfile

import pytest

from harness import factories
from registry import secret_box, storage
from registry.models import Event, LLMSpec, ModelVersion, ProviderSecret, Role, Task
from tests.registry.llm_archives import hf_files, tar_gz, zipped

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm_model(team_a):
    return factories.registered_model(team_a, name="chat", task=Task.LLM)


@pytest.fixture
def admin_a(team_a):
    user = factories.user("ada")
    factories.member(user, team_a, Role.ADMIN)
    return user


def upload(client, data: bytes, name: str, **fields):
    archive = io.BytesIO(data)
    archive.name = name
    return client.post("/api/v1/models/chat/llm-versions/", {"archive": archive, **fields}, format="multipart")


def stored_dirs() -> list:
    root = storage.root() / "dirs"
    return sorted(p for p in root.glob("*/*")) if root.exists() else []


HOSTILE = [
    ("traversal", lambda: tar_gz(hf_files(extra={"../escape.txt": b"x"})), "m.tar.gz", "archive_unsafe_path"),
    ("absolute", lambda: tar_gz(hf_files(extra={"/tmp/abs.txt": b"x"})), "m.tar.gz", "archive_unsafe_path"),
    ("symlink", lambda: tar_gz(hf_files(), links={"tok": "/etc/passwd"}), "m.tgz", "archive_link"),
    ("zip traversal", lambda: zipped(hf_files(extra={"../../escape.txt": b"x"})), "m.zip", "archive_unsafe_path"),
    ("pickle .bin", lambda: tar_gz(hf_files(extra={"pytorch_model.bin": b"\x80\x04K."})), "m.tar.gz", "pickle_weights"),
    ("pickle .pt in zip", lambda: zipped(hf_files(extra={"sub/w.pt": b"\x80\x04K."})), "m.zip", "pickle_weights"),
    ("not an archive", lambda: b"hello", "m.tar.gz", "archive_unreadable"),
    ("wrong suffix", lambda: tar_gz(hf_files()), "m.rar", "archive_format"),
    (
        "no config",
        lambda: tar_gz({k: v for k, v in hf_files().items() if k != "config.json"}),
        "m.tgz",
        "not_a_model_dir",
    ),
    (
        "no weights",
        lambda: tar_gz({k: v for k, v in hf_files().items() if k != "model.safetensors"}),
        "m.tgz",
        "no_weights",
    ),
    ("bad weights", lambda: tar_gz(hf_files(extra={"model.safetensors": b"\xff" * 64})), "m.tgz", "bad_weights"),
    ("config not JSON", lambda: tar_gz(hf_files(extra={"config.json": b"{nope"})), "m.tgz", "bad_model_config"),
    (
        "no tokenizer",
        lambda: tar_gz({k: v for k, v in hf_files().items() if not k.startswith("tokenizer")}),
        "m.tgz",
        "no_tokenizer",
    ),
]


@pytest.mark.parametrize(("case", "make", "filename", "code"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_archives_are_refused_and_leave_nothing(alice_api, llm_model, case, make, filename, code):
    response = upload(alice_api, make(), filename)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code, response.json()
    assert ModelVersion.objects.count() == 0 and stored_dirs() == []
    assert not list((storage.root() / "tmp").glob("*"))  # the upload and the unpacked files are gone


def test_context_length_past_the_models_own_or_the_bound_is_refused(alice_api, llm_model):
    too_long = upload(alice_api, tar_gz(hf_files()), "m.tar.gz", context_length=129)
    assert too_long.status_code == 400 and too_long.json()["code"] == "bad_context_length"
    assert "128" in too_long.json()["detail"]
    huge = upload(alice_api, tar_gz(hf_files()), "m.tar.gz", context_length=10**12)
    assert huge.status_code == 400, huge.content
    assert ModelVersion.objects.count() == 0


def test_an_archive_on_a_tensor_model_is_refused(alice_api, team_a):
    factories.registered_model(team_a, name="chat", task=Task.CTR)
    response = upload(alice_api, tar_gz(hf_files()), "m.tar.gz")
    assert response.status_code == 400 and response.json()["code"] == "model_not_llm"


def test_a_model_directory_becomes_a_version_with_its_triton_artifact(alice_api, llm_model):
    response = upload(alice_api, tar_gz(hf_files(), prefix="tiny/"), "tiny.tar.gz", cost_per_1k_prompt=0.5)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["source"] == "llm_dir" and body["status"] == "ready"
    assert body["llm"]["kind"] == "dir" and body["llm"]["context_length"] == 128
    assert body["llm"]["tokenizer"]["chat_template"] is True
    assert "tokenizer.json" in body["llm"]["tokenizer"]["files"]
    version = ModelVersion.objects.get(pk=body["id"])
    assert (storage.absolute(version.file_path) / "config.json").is_file()
    artifact = version.artifacts.get()
    assert artifact.pk == body["artifact"] and artifact.variant == "llm" and artifact.status == "servable"
    assert (storage.artifact_model_dir(artifact) / "config.pbtxt").is_file()


def test_an_archive_made_with_tar_dash_c_dot_loads(alice_api, llm_model, tmp_path):
    """`tar -C dir .` writes `.` and `./config.json`, ...: the directory itself is no path outside it."""
    import shutil
    import subprocess

    source = tmp_path / "model"
    source.mkdir()
    for name, data in hf_files().items():
        (source / name).write_bytes(data)
    archive = tmp_path / "model.tar.gz"
    subprocess.run([shutil.which("tar"), "-C", str(source), "-czf", str(archive), "."], check=True)
    with tarfile.open(archive) as tar:
        assert tar.getnames()[0] == "." and "./config.json" in tar.getnames()
    response = upload(alice_api, archive.read_bytes(), "model.tar.gz")
    assert response.status_code == 201, response.content
    assert response.json()["llm"]["context_length"] == 128
    zipped_dot = zipped({f"./{name}": data for name, data in hf_files().items()})
    factories.registered_model(llm_model.team, name="chat-zip", task=Task.LLM)
    archive_zip = io.BytesIO(zipped_dot)
    archive_zip.name = "m.zip"
    again = alice_api.post("/api/v1/models/chat-zip/llm-versions/", {"archive": archive_zip}, format="multipart")
    assert again.status_code == 201, again.content


# --- backend references and secrets -------------------------------------------------------------
def test_a_backend_reference_with_a_team_secret(api_for, admin_a, llm_model):
    client = api_for(admin_a)
    made = client.post(
        "/api/v1/secrets/",
        {
            "team": "team-a",
            "name": "provider",
            "value": "sk-test-1234567890abcd",
            "origins": ["https://llm.example.test"],
        },
        format="json",
    )
    assert made.status_code == 201 and made.json()["value"] == "sk-test-1234567890abcd"
    assert made["Cache-Control"] == "no-store"
    response = client.post(
        "/api/v1/models/chat/llm-versions/",
        {
            "base_url": "https://llm.example.test/v1/",
            "upstream_model": "big-model",
            "secret": "provider",
            "context_length": 8192,
            "cost_per_1k_prompt": 0.25,
            "cost_per_1k_completion": 1.0,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["source"] == "llm_backend" and body["llm"]["secret"] == "provider"
    assert body["llm"]["base_url"] == "https://llm.example.test/v1" and body["llm"]["context_length"] == 8192
    artifact = ModelVersion.objects.get(pk=body["id"]).artifacts.get()
    assert artifact.variant == "llm-backend" and artifact.pk == body["artifact"]
    assert "sk-test" not in json.dumps(body)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"base_url": "ftp://x/v1", "upstream_model": "m"}, "base_url"),
        ({"base_url": "http://user:pw@x/v1", "upstream_model": "m"}, "base_url"),
        ({"base_url": "http://x/v1", "upstream_model": "has space"}, "upstream_model"),
        ({"base_url": "http://x/v1", "upstream_model": "m", "cost_per_1k_prompt": -1}, "cost_per_1k_prompt"),
        ({"base_url": "http://x/v1", "upstream_model": "m", "context_length": 0}, "context_length"),
        ({"base_url": "http://x/v1"}, "upstream_model"),
    ],
)
def test_bad_backend_references_are_400s(alice_api, llm_model, fields, field):
    response = alice_api.post("/api/v1/models/chat/llm-versions/", fields, format="json")
    assert response.status_code == 400, response.content
    assert field in json.dumps(response.json())
    assert ModelVersion.objects.count() == 0


def test_another_teams_secret_reads_as_unknown(api_for, admin_a, bob, team_b):
    api_for(admin_a).post(
        "/api/v1/secrets/",
        {"team": "team-a", "name": "provider", "value": "sk-of-team-a-000000", "origins": ["http://x"]},
        format="json",
    )
    factories.registered_model(team_b, name="bobs-chat", task=Task.LLM)
    client = api_for(bob)

    def register(secret):
        return client.post(
            "/api/v1/models/bobs-chat/llm-versions/",
            {"base_url": "http://x/v1", "upstream_model": "m", "secret": secret},
            format="json",
        )

    theirs, unknown = register("provider"), register("no-such-secret")
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["code"] == unknown.json()["code"] == "secret_not_found"
    assert ModelVersion.objects.count() == 0
    secret = ProviderSecret.objects.get()
    assert client.get(f"/api/v1/secrets/{secret.pk}/").status_code == 404
    assert client.get("/api/v1/secrets/").json()["count"] == 0


def test_a_secret_is_never_shown_again_and_is_encrypted_at_rest(api_for, admin_a, alice):
    value = "sk-live-abcdefghijklmnop-WXYZ"
    client = api_for(admin_a)
    made = client.post(
        "/api/v1/secrets/",
        {"team": "team-a", "name": "provider", "value": value, "origins": ["https://api.example.test"]},
        format="json",
    ).json()
    row = ProviderSecret.objects.get()
    assert value not in row.ciphertext and secret_box.open_sealed(row.ciphertext) == value
    for reader in (client, api_for(alice)):
        listed = reader.get("/api/v1/secrets/").content.decode()
        detail = reader.get(f"/api/v1/secrets/{made['id']}/").content.decode()
        assert value not in listed and value not in detail and row.ciphertext not in detail
        assert '"last4":"WXYZ"' in detail.replace(" ", "")
    events = Event.objects.filter(object_type="registry.providersecret")
    assert events.count() == 1 and value not in json.dumps(list(events.values("data", "reason", "object_repr")))


def test_secret_writes_need_the_admin_role_and_a_secret_in_use_stays(api_for, admin_a, alice, llm_model):
    assert (
        api_for(alice)
        .post(
            "/api/v1/secrets/",
            {"team": "team-a", "name": "p", "value": "v" * 20, "origins": ["http://x"]},
            format="json",
        )
        .status_code
        == 403
    )
    client = api_for(admin_a)
    secret = client.post(
        "/api/v1/secrets/", {"team": "team-a", "name": "p", "value": "v" * 20, "origins": ["http://x"]}, format="json"
    ).json()
    bad = client.post(
        "/api/v1/secrets/",
        {"team": "team-a", "name": "q", "value": "has space", "origins": ["http://x"]},
        format="json",
    )
    assert bad.status_code == 400 and bad.json()["code"] == "bad_secret_value"
    client.post(
        "/api/v1/models/chat/llm-versions/",
        {"base_url": "http://x/v1", "upstream_model": "m", "secret": "p"},
        format="json",
    )
    in_use = client.delete(f"/api/v1/secrets/{secret['id']}/")
    assert in_use.status_code == 409 and in_use.json()["code"] == "secret_in_use"
    LLMSpec.objects.all().delete()
    assert client.delete(f"/api/v1/secrets/{secret['id']}/").status_code == 204
    assert not ProviderSecret.objects.exists()


def test_the_key_can_be_rotated_with_provider_secrets_key(settings):
    from cryptography.fernet import Fernet

    old = secret_box.seal("sk-rotate-me")  # under the key derived from SECRET_KEY
    new_key = Fernet.generate_key().decode()
    settings.PROVIDER_SECRETS_KEY = f"{new_key},{secret_box.derived_key(settings.SECRET_KEY).decode()}"
    assert secret_box.open_sealed(old) == "sk-rotate-me"
    sealed = secret_box.seal("sk-new")
    settings.PROVIDER_SECRETS_KEY = new_key
    assert secret_box.open_sealed(sealed) == "sk-new"
    with pytest.raises(secret_box.SecretUnreadable):
        secret_box.open_sealed(old)


def test_the_model_and_version_pages_show_an_llm_version(alice, llm_model):
    from django.test import Client

    artifact = factories.llm_artifact(llm_model.team, model_name="chat", kind="openai")
    client = Client()
    client.force_login(alice)
    assert client.get("/models/chat/").status_code == 200
    page = client.get(f"/models/versions/{artifact.version_id}/")
    assert page.status_code == 200 and "llm-backend" in page.content.decode()


def test_the_admin_console_shows_a_secrets_name_never_its_value(staff, team_a, admin_a):
    from django.test import Client

    from registry.services.llm import secret_create

    secret = secret_create(
        user=admin_a,
        team=team_a,
        name="provider",
        value="sk-admin-view-0123456789",
        origins=["https://api.example.test"],
    )
    client = Client()
    client.force_login(staff)
    for url in ("/admin/registry/providersecret/", f"/admin/registry/providersecret/{secret.pk}/change/"):
        page = client.get(url)
        text = page.content.decode()
        assert page.status_code == 200 and "provider" in text
        assert "sk-admin-view" not in text and secret.ciphertext not in text


# --- tenant URLs pass the outbound guard; secrets go only to their origins ------------------------
@pytest.mark.parametrize(
    ("base_url", "code"),
    [
        # the SSRF: another team's Triton `unload` URL, its `?` swallowing the appended route
        ("http://127.0.0.1:18001/v2/repository/models/ctr__v1__onnx/unload?", "url_query"),
        ("http://127.0.0.1:18001/v1", "url_loopback"),
        ("http://[::ffff:127.0.0.1]:18001/v1", "url_loopback"),
        ("http://169.254.169.254/latest", "url_metadata"),
        ("http://10.1.2.3:8000/v1", "url_private"),
        ("http://x/v1#frag", "url_fragment"),
        ("http://x/v1\\@evil", "url_malformed"),
        ("http://llm.example.test/v1?api-version=1", "url_query"),
    ],
)
def test_internal_or_rewritable_base_urls_are_refused_naming_the_rule(alice_api, llm_model, base_url, code):
    response = alice_api.post(
        "/api/v1/models/chat/llm-versions/", {"base_url": base_url, "upstream_model": "m"}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code and response.json()["detail"].startswith("base_url")
    assert ModelVersion.objects.count() == 0


def test_the_platforms_own_listeners_stay_refused_when_loopback_is_allowed(alice_api, llm_model, settings):
    """An operator who allow-lists loopback for a local vLLM does not open the gateway, the web
    server or a pool replica: a Triton pool is reached by pool, never by URL."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    pool = factories.pool(llm_model.team, "their-pool", ready_replicas=1)
    replica = pool.replica_set.get()
    for base_url in (
        f"http://127.0.0.1:{settings.GATEWAY_PORT}/v1",
        f"http://localhost:{settings.GATEWAY_GRPC_PORT}/v1",
        f"http://127.0.0.1:{settings.PORT}/v1",
        f"{replica.http_url}/v2/repository/models/ctr/unload",
    ):
        response = alice_api.post(
            "/api/v1/models/chat/llm-versions/", {"base_url": base_url, "upstream_model": "m"}, format="json"
        )
        assert response.status_code == 400 and response.json()["code"] == "url_platform_listener", base_url
    allowed = alice_api.post(
        "/api/v1/models/chat/llm-versions/",
        {"base_url": "http://127.0.0.1:18999/v1", "upstream_model": "m"},
        format="json",
    )
    assert allowed.status_code == 201, allowed.content


def test_a_secret_goes_only_to_the_origins_it_was_bound_to(api_for, admin_a, alice, llm_model):
    """The issue's exfiltration: a deployer registers a backend at a listener of their own naming
    the team's provider secret. Refused at registration: the secret is bound to the provider's origin."""
    admin = api_for(admin_a)
    made = admin.post(
        "/api/v1/secrets/",
        {
            "team": "team-a",
            "name": "provider",
            "value": "sk-bound-0123456789",
            "origins": ["https://api.example.test/"],
        },
        format="json",
    )
    assert made.status_code == 201 and made.json()["origins"] == ["https://api.example.test"]
    deployer = api_for(alice)

    def register(base_url):
        return deployer.post(
            "/api/v1/models/chat/llm-versions/",
            {"base_url": base_url, "upstream_model": "m", "secret": "provider"},
            format="json",
        )

    for elsewhere in (
        "https://listener.example.test/v1",
        "http://api.example.test/v1",
        "https://api.example.test:8443/v1",
    ):
        refused = register(elsewhere)
        assert refused.status_code == 400 and refused.json()["code"] == "secret_origin_mismatch", elsewhere
    assert register("https://api.example.test/v1").status_code == 201
    assert register("https://API.example.test:443/v2").status_code == 201  # the same origin


@pytest.mark.parametrize(
    ("origins", "code"),
    [
        ([], "bad_origins"),
        (["https://api.example.test/v1"], "url_path"),
        (["http://127.0.0.1:9999"], "url_loopback"),
        (["https://user:pw@api.example.test"], "url_userinfo"),
        (["ftp://api.example.test"], "url_scheme"),
    ],
)
def test_bad_secret_origins_are_400s(api_for, admin_a, origins, code):
    response = api_for(admin_a).post(
        "/api/v1/secrets/",
        {"team": "team-a", "name": "p", "value": "sk-0123456789ab", "origins": origins},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert origins == [] or response.json()["code"] == code
    assert not ProviderSecret.objects.exists()
