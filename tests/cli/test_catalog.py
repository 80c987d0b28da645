"""`modelplane` against a live server: login and its config file, models and versions
(upload, MLflow link), errors from the API's {"detail","code"} with their exit codes."""

import stat

import pytest

from harness import factories
from modelplane_cli import exits
from registry.models import ModelVersion, RegisteredModel
from tests.cli.conftest import cli_env, run_cli

pytestmark = pytest.mark.integration


def test_login_checks_the_token_and_stores_it_0600(live_server, alice, team_a, cli_home):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=alice).key
    env = cli_env(cli_home)
    refused = run_cli("login", "--url", live_server.url, "--token", "not-a-token", env=env)
    assert refused.code == exits.AUTH, refused
    assert "Invalid token" in refused.err and "login" in refused.err
    config = cli_home / ".config" / "modelplane" / "config.json"
    assert not config.exists()  # a refused token is never stored

    elsewhere = run_cli(
        "login", "--url", live_server.url + "/not-the-api", "--token", token, env=env
    )  # an HTML 404 page
    assert elsewhere.code == exits.API and "is --url the modelplane server?" in elsewhere.err, elsewhere
    assert not config.exists()

    done = run_cli(
        "login", "--url", live_server.url + "/api/v1/", env=env, stdin=token + "\n"
    )  # token on stdin, URL normalized
    assert done.code == 0, done
    assert "team-a" in done.out and "developer" in done.out
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert token in config.read_text() and live_server.url + '"' in config.read_text()

    me = run_cli("whoami", "--json", env=env)
    assert me.code == 0, me
    assert me.json()["teams"] == [{"id": team_a.pk, "name": "team-a", "role": "developer"}]
    assert me.json()["token_from"] == str(config)

    # the environment overrides the stored login: a bad MODELPLANE_TOKEN is an auth failure
    overridden = run_cli("model", "list", env={**env, "MODELPLANE_TOKEN": "bad"})
    assert overridden.code == exits.AUTH and "Invalid token" in overridden.err, overridden
    config.chmod(0o644)
    warned = run_cli("model", "list", env=env)
    assert warned.code == 0 and "readable by others" in warned.err, warned
    assert run_cli("logout", env=env).code == 0
    assert token not in config.read_text()
    assert run_cli("model", "list", env=env).code == exits.AUTH


def test_no_login_and_unreachable_server(cli_home):
    env = cli_env(cli_home)
    nothing = run_cli("model", "list", env=env)
    assert nothing.code == exits.AUTH and "modelplane login" in nothing.err, nothing
    down = run_cli("--url", "http://127.0.0.1:9", "--token", "x", "model", "list", "--json", env=env)
    assert down.code == exits.NETWORK, down
    assert '"exit_code": 5' in down.err and "cannot reach" in down.err and down.out == ""
    bad_url = run_cli("--url", "file:///etc/passwd", "--token", "x", "model", "list", env=env)
    assert bad_url.code == exits.USAGE and "http://" in bad_url.err, bad_url


def test_models_and_versions(cli_as, alice, bob, team_a, team_b, onnx_path, tmp_path):
    cli = cli_as(alice)
    created = cli("model", "create", "ctr-cli", "--team", "team-a", "--description", "CTR from CI", "--json")
    assert created.code == 0, created
    assert created.json()["name"] == "ctr-cli" and created.json()["team"] == "team-a"
    assert RegisteredModel.objects.get(name="ctr-cli").created_by == alice

    again = cli("model", "create", "ctr-cli", "--team", "team-a")
    assert again.code == exits.API and again.err.startswith("error: name:") and "HTTP 409" in again.err, again
    elsewhere = cli("model", "create", "other", "--team", "team-b")  # not a team alice may create in
    assert elsewhere.code == exits.API and "team" in elsewhere.err, elsewhere

    listed = cli("model", "list")
    assert listed.code == 0 and listed.out.splitlines()[0].split()[:3] == ["NAME", "TEAM", "TASK"], listed
    assert "ctr-cli" in listed.out

    uploaded = cli("version", "upload", "ctr-cli", onnx_path, "--metric", "auc=0.74", "--tag", "owner=ci", "--json")
    assert uploaded.code == 0, uploaded
    version = uploaded.json()
    assert version["version"] == 1 and version["metrics"] == {"auc": 0.74} and version["tags"] == {"owner": "ci"}
    assert [t["name"] for t in version["signature"]["inputs"]] == ["dense", "sparse"]
    assert cli("version", "upload", "ctr-cli", onnx_path, "--field", "version").out.strip() == "2"

    shown = cli("version", "get", version["id"])
    assert shown.code == 0 and "inputs:" in shown.out and "dense" in shown.out and "sparse" in shown.out, shown
    versions = cli("version", "list", "ctr-cli", "--page-size", "1")
    assert versions.code == 0 and "(1 of 2 shown" in versions.out, versions
    assert len(cli("version", "list", "ctr-cli", "--page-size", "1", "--all", "--json").json()["results"]) == 2

    # bad input: a clear message naming what is wrong, exit 4, nothing stored
    not_onnx = tmp_path / "model.onnx"
    not_onnx.write_bytes(b"this is not an onnx graph")
    refused = cli("version", "upload", "ctr-cli", not_onnx)
    assert refused.code == exits.API and "Not an ONNX model" in refused.err and "HTTP 400" in refused.err, refused
    assert len(refused.err.strip().splitlines()) == 1  # the field's message is not printed twice
    assert ModelVersion.objects.filter(model__name="ctr-cli").count() == 2
    bad_metric = cli("version", "upload", "ctr-cli", onnx_path, "--metric", "auc=high")
    assert bad_metric.code == exits.USAGE and "auc" in bad_metric.err, bad_metric
    missing_file = cli("version", "upload", "ctr-cli", tmp_path / "nope.onnx")
    assert missing_file.code == exits.USAGE, missing_file

    # unknown models and another team's models are both "not found" (exit 4)
    unknown = cli("model", "get", "no-such-model")
    assert unknown.code == exits.API and "not_found" in unknown.err and "HTTP 404" in unknown.err, unknown
    factories.registered_model(team_b, name="bobs-model")
    assert cli("model", "get", "bobs-model").code == exits.API
    assert cli("version", "upload", "bobs-model", onnx_path).code == exits.API
    traversal = cli("model", "get", "../teams")  # a name never reaches another resource
    assert traversal.code == exits.API and "HTTP 404" in traversal.err, traversal
    as_json = cli("model", "get", "no-such-model", "--json")
    assert as_json.code == exits.API and as_json.out == ""
    assert '"code": "not_found"' in as_json.err and '"status": 404' in as_json.err


def test_link_an_mlflow_run(cli_as, alice, team_a, settings, tmp_path, onnx_path):
    import mlflow
    import onnx

    from kernel import mlflow as mlflow_config

    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()
    try:
        with mlflow.start_run(experiment_id=mlflow_config.experiment_id("cli-test", team="team-a")) as run:
            mlflow.log_metric("auc", 0.71)
            mlflow.onnx.log_model(onnx.load(str(onnx_path)), name="model")
        factories.registered_model(team_a, name="linked")
        cli = cli_as(alice)
        linked = cli("version", "link", "linked", f"runs:/{run.info.run_id}/model", "--json")
        assert linked.code == 0, linked
        assert linked.json()["source"] == "mlflow" and linked.json()["framework"] == "onnx"
        gone = cli("version", "link", "linked", "runs:/0123456789abcdef/model")
        assert gone.code == exits.API and "source_not_found" in gone.err, gone
        local = cli("version", "link", "linked", "file:///etc/passwd")
        assert local.code == exits.API and "bad_source_uri" in local.err, local
    finally:
        mlflow_config.configure.cache_clear()


def test_an_upload_over_the_limit_is_refused_with_the_reason(cli_as, alice, team_a, settings, tmp_path):
    settings.MAX_UPLOAD_MB = 1
    factories.registered_model(team_a, name="big")
    huge = tmp_path / "huge.onnx"
    huge.write_bytes(b"\0" * (3 * 1024 * 1024))
    refused = cli_as(alice)("version", "upload", "big", huge)
    assert refused.code == exits.API and "MAX_UPLOAD_MB" in refused.err and "HTTP 413" in refused.err, refused
    assert not ModelVersion.objects.exists()


def test_llm_versions(cli_as, alice, team_a, tmp_path):
    """An LLM backend reference and a hostile model directory archive through the CLI."""
    import io
    import tarfile

    from registry.models import Task

    factories.registered_model(team_a, name="chat", task=Task.LLM)
    cli = cli_as(alice)
    inside = cli("version", "llm-backend", "chat", "--base-url", "http://10.0.0.5:8000/v1", "--upstream-model", "m")
    assert inside.code != 0 and "url_private" in inside.err + inside.out, inside  # the one service check
    made = cli(
        "version", "llm-backend", "chat", "--base-url", "https://llm.example.test/v1", "--upstream-model", "m", "--json"
    )
    assert made.code == 0, made
    assert made.json()["llm"]["kind"] == "openai" and made.json()["artifact"]
    unknown = cli(
        "version", "llm-backend", "chat", "--base-url", "http://x/v1", "--upstream-model", "m", "--secret", "nope"
    )
    assert unknown.code != 0 and "secret_not_found" in unknown.err + unknown.out, unknown
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../evil.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    refused = cli("version", "llm-upload", "chat", str(archive))
    assert refused.code != 0 and "archive" in refused.err, refused
    assert ModelVersion.objects.filter(model__name="chat").count() == 1
