import pytest


@pytest.fixture(autouse=True)
def pools_dir(tmp_path, settings, monkeypatch):
    """Local pools of each test live under its own directory (never var/pools); a
    tritonserver still running there when the test ends (e.g. it failed half-way) is
    killed with its process group, so no test leaves servers behind."""
    path = tmp_path / "pools"
    settings.POOLS_DIR = path
    monkeypatch.setenv("POOLS_DIR", str(path))
    yield path
    from serving import tritonserver

    for pid, _ in tritonserver.tritonservers_under(path):
        tritonserver.kill_group(pid)
