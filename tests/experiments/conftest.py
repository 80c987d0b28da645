import shutil

import pytest

from tests.experiments.captured import column_store, served  # noqa: F401  (fixtures)


@pytest.fixture(scope="session")
def empty_mlflow_db(tmp_path_factory):
    """An MLflow sqlite tracking store with its schema migrated, made once per session:
    each test copies it (migrating a fresh store costs ~10 s on this machine)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("mlflow-template")
    path = folder / "mlflow.db"
    store = SqlAlchemyStore(f"sqlite:///{path}", str(folder / "artifacts"))
    store.engine.dispose()
    return path


@pytest.fixture
def mlflow_store(settings, tmp_path, empty_mlflow_db):
    """This test's own tracking store (a copy of the migrated template) and artifact root."""
    from kernel import mlflow as mlflow_config

    shutil.copy(empty_mlflow_db, tmp_path / "mlflow.db")
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()
    yield mlflow_config.client()
    mlflow_config.configure.cache_clear()
