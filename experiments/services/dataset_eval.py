"""Offline evaluation of model versions on a dataset's validation split: the later window of the
platform's own traffic, which a version trained on the dataset never learned from.

Each version is scored as it is served: its servable ONNX artifact (onnx-fp32 first) run with
ONNX Runtime on the split's inputs, its first output read as the click probability, AUC and
log loss against the clicks. By default the versions are the ones the dataset's experiment
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
    """The versions the dataset's experiment served and those trained on it, oldest first."""
    from experiments.selectors.datasets import dataset_versions

    versions = {v.pk: v for v in dataset_versions(user=user, dataset=dataset)}
    if dataset.experiment is not None:
        for arm in dataset.experiment.arms.select_related("artifact__version__model"):
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


def dataset_evaluate(*, dataset, versions) -> list[dict]:
    """[{version, model, tag, trained_on_it, artifact, auc, logloss, rows}] on the validation split."""
    arrays = dataset_arrays(dataset, "valid")
    labels = arrays["label"]
    out = []
    for version in versions:
        artifact, path = _onnx_file(version)
        scores = np.clip(_scores(path, arrays), 1e-7, 1 - 1e-7)
        out.append(
            {
                "version": version.pk,
                "model": version.model.name,
                "number": version.version,
                "tag": (version.tags or {}).get("version_tag", ""),
                "trained_on_it": (version.tags or {}).get("dataset") == dataset.public_id,
                "artifact": artifact.variant,
                "auc": auc(labels, scores),
                "logloss": logloss(labels, scores),
                "rows": int(len(labels)),
            }
        )
    return out
