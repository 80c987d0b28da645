import shutil

import pytest

from registry import storage
from registry.models import Artifact, ArtifactStatus, Build, BuildStatus, ModelVersion, RegisteredModel, Role, VersionSource
from tests import factories
from tests.deployments.packaging import write_model_dir


@pytest.fixture(autouse=True)
def pools_dir(tmp_path, settings, monkeypatch):
    """Local pools of each test live under its own directory (never var/pools); a
    tritonserver still running there when the test ends (e.g. it failed half-way) is
    killed with its process group, so no test leaves servers behind."""
    path = tmp_path / "pools"
    settings.POOLS_DIR = path
    monkeypatch.setenv("POOLS_DIR", str(path))
    yield path
    from deployments import tritonserver

    for pid, _ in tritonserver.tritonservers_under(path):
        tritonserver.kill_group(pid)


@pytest.fixture
def deployer(team_a):
    user = factories.user("dora")
    factories.member(user, team_a, Role.DEPLOYER)
    return user


@pytest.fixture
def deployer_api(deployer, api_for):
    return api_for(deployer)


def make_artifact(team, onnx_path, tmp_path, *, model_name="ctr", status=ArtifactStatus.SERVABLE, variant="onnx-fp32", broken=False) -> Artifact:
    """An Artifact row over a packaged model directory stored like the factory stores it
    (registry.storage.put_dir: Artifact.path is the content-addressed directory)."""
    model = RegisteredModel.objects.filter(name=model_name).first() or factories.registered_model(team, name=model_name)
    version = ModelVersion.objects.create(
        model=model, version=model.versions.count() + 1, source=VersionSource.UPLOAD, file_sha256="0" * 64, file_path="x.onnx"
    )
    build = Build.objects.create(version=version, targets=[variant], status=BuildStatus.SUCCEEDED)
    name = f"{model.name}__v{version.version}__{variant}"
    staged = write_model_dir(tmp_path / "staging", name, onnx_path, broken=broken)
    rel, sha = storage.put_dir(staged)
    shutil.rmtree(tmp_path / "staging", ignore_errors=True)
    return Artifact.objects.create(
        version=version, build=build, variant=variant, status=status, triton_model_name=name, path=rel, sha256=sha
    )


@pytest.fixture
def artifact_factory(onnx_path, tmp_path):
    def make(team, **kwargs):
        return make_artifact(team, onnx_path, tmp_path, **kwargs)

    return make
