"""Offline evaluation of model versions on a dataset's validation split: the later window of the
platform's own traffic, which a version trained on the dataset never learned from.

Each version is scored as it is served: its servable ONNX artifact (onnx-fp32 first) run with
ONNX Runtime on the split's inputs, its first output read as the click probability, AUC and
log loss against the clicks. A version trained on the dataset by train_reference_model and not
built yet is scored as registered (the in-tree reference model from its MLflow run, the file the
factory would build from), so the closed loop's v3 is compared before a release builds it. By default the versions are the ones the dataset's experiment
served (its arms) and the ones trained on the dataset: the closed loop's v1, v2 and v3 side by side.
"""

from __future__ import annotations

import numpy as np

from experiments.services.datasets import dataset_arrays
from kernel.errors import InvalidInput
from registry.models import ArtifactStatus
from registry.quality import auc, logloss

BATCH = 4096


def default_versions(*, user, dataset) -> list:
    """The versions the dataset's experiment served (without one: every experiment of its endpoint
    that ran in its window) and those trained on it, oldest first."""
    from django.db.models import Q

    from experiments.models import Arm
    from experiments.selectors.datasets import dataset_versions

    versions = {v.pk: v for v in dataset_versions(user=user, dataset=dataset)}
    if dataset.experiment is not None:
        arms = dataset.experiment.arms.all()
    else:  # the arms of the endpoint's experiments that ran during the window
        arms = Arm.objects.filter(
            experiment__endpoint=dataset.endpoint_id, experiment__started_at__lt=dataset.window_end
        ).filter(Q(experiment__ended_at__isnull=True) | Q(experiment__ended_at__gt=dataset.window_start))
    for arm in arms.select_related("artifact__version__model"):
        versions.setdefault(arm.artifact.version_id, arm.artifact.version)
    return sorted(versions.values(), key=lambda v: (v.model.name, v.version))


def _onnx_file(version):
    from registry.storage import artifact_model_dir

    artifacts = [
        a for a in version.artifacts.filter(status=ArtifactStatus.SERVABLE, variant__startswith="onnx-") if a.path
    ]
    artifacts.sort(key=lambda a: (a.variant != "onnx-fp32", -a.pk))
    for artifact in artifacts:
        path = artifact_model_dir(artifact) / "1" / "model.onnx"
        if path.is_file():
            return artifact, path
    raise InvalidInput(
        f"versions: {version.model.name} v{version.version} has no servable ONNX artifact to score (build it first).",
        field="versions",
        code="no_onnx_artifact",
    )


def _scores(path, arrays: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.log_severity_level = 2, 3
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise InvalidInput(
            f"versions: the model asks for inputs {missing} the dataset has not (it has {sorted(arrays)}).",
            field="versions",
            code="inputs_mismatch",
        )
    rows = len(arrays["label"])
    out = []
    for i in range(0, rows, BATCH):
        feed = {n: arrays[n][i : i + BATCH] for n in names}
        out.append(np.asarray(sess.run(None, feed)[0], dtype=np.float64).reshape(-1))
    return np.concatenate(out) if out else np.zeros(0)


def _trained_here(version, dataset) -> bool:
    """Trained on this dataset by train_reference_model (its tag), registered from MLflow."""
    tags = version.tags or {}
    return tags.get("dataset") == dataset.public_id and version.source == "mlflow" and bool(version.source_uri)


def _registered_scores(version, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The reference model as registered (its MLflow run's module, the in-tree class) on the split."""
    import mlflow.pytorch

    from experiments.reference.data import ClickLog
    from experiments.reference.train import predict
    from kernel import mlflow as mlflow_config

    mlflow_config.configure()
    model = mlflow.pytorch.load_model(version.source_uri, map_location="cpu")
    return np.asarray(predict(model, ClickLog(dense=arrays["dense"], sparse=arrays["sparse"], label=arrays["label"])))


def dataset_evaluate(*, dataset, versions) -> list[dict]:
    """[{version, model, tag, trained_on_it, artifact, auc, logloss, rows}] on the validation split."""
    arrays = dataset_arrays(dataset, "valid")
    labels = arrays["label"]
    out = []
    for version in versions:
        try:
            artifact, path = _onnx_file(version)
        except InvalidInput:
            if not _trained_here(version, dataset):
                raise
            artifact, raw = None, _registered_scores(version, arrays)
        else:
            raw = _scores(path, arrays)
        scores = np.clip(raw.reshape(-1), 1e-7, 1 - 1e-7)
        out.append(
            {
                "version": version.pk,
                "model": version.model.name,
                "number": version.version,
                "tag": (version.tags or {}).get("version_tag", ""),
                "trained_on_it": (version.tags or {}).get("dataset") == dataset.public_id,
                "artifact": artifact.variant if artifact is not None else "registered (not built yet)",
                "auc": auc(labels, scores),
                "logloss": logloss(labels, scores),
                "rows": int(len(labels)),
            }
        )
    return out
