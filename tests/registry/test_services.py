import pytest

from harness import factories
from kernel.errors import Conflict, Forbidden, InvalidInput
from registry import storage
from registry.models import Event, ModelVersion, Role
from registry.services.catalog import model_create, model_delete, version_create_from_upload
from registry.services.teams import membership_set

pytestmark = pytest.mark.django_db


def _upload(user, model, path, name="model.onnx"):
    data = path.read_bytes()
    return version_create_from_upload(user=user, model=model, filename=name, chunks=[data], size=len(data))


def test_model_create_records_event_in_same_transaction(alice, team_a):
    model = model_create(user=alice, name="ctr-ranker", team=team_a, description="d")
    event = Event.objects.get(object_type="registry.registeredmodel", object_id=str(model.pk))
    assert (event.actor, event.team, event.action, event.to_state) == (alice, team_a, "created", "registered")


def test_viewer_may_not_register_models(team_a):
    viewer = factories.user()
    factories.member(viewer, team_a, Role.VIEWER)
    with pytest.raises(Forbidden):
        model_create(user=viewer, name="x", team=team_a)
    assert not Event.objects.exists()


def test_developer_may_not_register_in_another_team(alice, team_b):
    with pytest.raises(Forbidden):
        model_create(user=alice, name="x", team=team_b)


def test_duplicate_and_bad_names_are_refused(alice, team_a):
    model_create(user=alice, name="dup", team=team_a)
    with pytest.raises(Conflict) as exc:
        model_create(user=alice, name="dup", team=team_a)
    assert exc.value.field == "name"
    for bad in ("", "Upper", "has space", "../x", "x" * 65):
        with pytest.raises(InvalidInput):
            model_create(user=alice, name=bad, team=team_a)


def test_versions_increment_and_files_are_content_addressed(alice, team_a, onnx_path):
    model = model_create(user=alice, name="m", team=team_a)
    v1 = _upload(alice, model, onnx_path)
    v2 = _upload(alice, model, onnx_path)
    assert (v1.version, v2.version) == (1, 2)
    assert v1.file_path == v2.file_path == f"sha256/{v1.file_sha256[:2]}/{v1.file_sha256}.onnx"
    assert storage.absolute(v1.file_path).read_bytes() == onnx_path.read_bytes()
    assert [t["name"] for t in v1.signature["inputs"]] == ["dense", "sparse"]
    assert v1.signature["inputs"][1] == {"name": "sparse", "dtype": "int64", "shape": [-1, 26]}
    assert v1.signature["outputs"] == [{"name": "ctr", "dtype": "float32", "shape": [-1, 1]}]


def test_model_delete_only_when_unused(alice, team_a, onnx_path):
    model = model_create(user=alice, name="m", team=team_a)
    _upload(alice, model, onnx_path)
    with pytest.raises(Conflict) as exc:
        model_delete(user=alice, model=model)
    assert exc.value.code == "model_in_use"
    empty = model_create(user=alice, name="empty", team=team_a)
    model_delete(user=alice, model=empty)
    assert Event.objects.filter(action="deleted", object_repr="empty").exists()


def test_refused_upload_stores_nothing(alice, team_a, tmp_path):
    model = model_create(user=alice, name="m", team=team_a)
    with pytest.raises(InvalidInput):
        version_create_from_upload(user=alice, model=model, filename="m.onnx", chunks=[b"\x80\x04K\x01."])
    assert not ModelVersion.objects.exists()
    assert [p for p in storage.root().rglob("*") if p.is_file()] == []


def test_membership_set_needs_team_admin(alice, team_a, staff):
    newcomer = factories.user()
    with pytest.raises(Forbidden):
        membership_set(user=alice, team=team_a, member=newcomer, role=Role.DEPLOYER)
    membership = membership_set(user=staff, team=team_a, member=newcomer, role=Role.DEPLOYER)
    assert membership.role == Role.DEPLOYER
    assert newcomer.groups.filter(pk=team_a.pk).exists()


def test_a_trained_version_that_cannot_be_registered_leaves_no_stored_validation_set(alice, team_a):
    """version_register_trained stores the validation set, then creates the version; when the
    creation is refused (here: not an MLflow URI) the stored set is removed again."""
    import numpy as np

    from registry.services.catalog import version_register_trained

    validation = {"dense": np.zeros((4, 3), dtype=np.float32), "label": np.array([0, 1, 0, 1])}
    with pytest.raises(InvalidInput, match="source_uri"):
        version_register_trained(
            user=alice,
            name="trained",
            team=team_a,
            source_uri="s3://elsewhere/model",
            metrics={},
            tags={},
            validation=validation,
        )
    assert [p for p in storage.root().rglob("*.npz") if p.is_file()] == []
    assert not list(storage.tmp_dir().glob("*.npz"))
