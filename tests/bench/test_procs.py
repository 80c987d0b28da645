"""The benchmarks' /proc readers and their pinning plan (bench/procs.py): CPU from a
process's own stat line (a command name with spaces and parentheses does not shift the
fields), PSS from smaps_rollup, the process tree from the children files, and the plan that
gives the proxy, the backend and the load generator cores of their own, or says why not."""

import os
from pathlib import Path

import pytest

from bench import idle, procs

STAT = (
    "4242 (python (gw) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 "
    "731 129 0 0 20 0 3 0 5000 100000000 2000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
)
ROLLUP = """55d0c0de0000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]
Rss:              102400 kB
Pss:               51234 kB
Pss_Anon:          40000 kB
Shared_Clean:      20000 kB
"""


def fake_proc(tmp_path: Path, tree: dict[int, list[int]]) -> Path:
    """A /proc with stat, smaps_rollup, cmdline and task/<tid>/children for each pid of `tree`."""
    for pid, kids in tree.items():
        task = tmp_path / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (task / "children").write_text(" ".join(map(str, kids)) + (" " if kids else ""))
        (tmp_path / str(pid) / "stat").write_text(STAT.replace("4242", str(pid), 1))
        (tmp_path / str(pid) / "smaps_rollup").write_text(ROLLUP)
        (tmp_path / str(pid) / "cmdline").write_bytes(b"python\0-m\0gateway\0")
    (tmp_path / "loadavg").write_text("3.41 2.07 1.50 4/812 9999\n")
    return tmp_path


def test_stat_fields_are_counted_after_the_command_name():
    assert procs.parse_stat(STAT) == (731, 129)


def test_pss_from_smaps_rollup():
    assert procs.parse_smaps_rollup(ROLLUP) == 51234
    with pytest.raises(ValueError):
        procs.parse_smaps_rollup("Rss: 1 kB\n")


def test_tree_cpu_memory_and_load_from_a_proc_directory(tmp_path):
    proc = fake_proc(tmp_path, {10: [11, 12], 11: [13], 12: [], 13: []})
    assert sorted(procs.process_tree(10, proc)) == [10, 11, 12, 13]
    user, system = procs.cpu_seconds([10, 11, 99], proc)  # 99 is gone: it counts nothing
    tick = os.sysconf("SC_CLK_TCK")
    assert (user, system) == (2 * 731 / tick, 2 * 129 / tick)
    assert procs.pss_kib(13, proc) == 51234 and procs.pss_kib(99, proc) is None
    assert procs.cmdline(10, proc) == ["python", "-m", "gateway"]
    assert procs.load_average(proc) == [3.41, 2.07, 1.5]


def test_the_idle_summary_counts_cpu_between_snapshots_per_component():
    before = {1: {"role": "web", "ticks": 100, "pss_kib": 1024}, 2: {"role": "gateway", "ticks": 50, "pss_kib": 0}}
    after = {
        1: {"role": "web", "ticks": 160, "pss_kib": 2048},
        2: {"role": "gateway", "ticks": 62, "pss_kib": 1024},
        3: {"role": "web", "ticks": 40, "pss_kib": 1024},  # started meanwhile: counts from 0
    }
    summary = idle.summarize(before, after, 100.0, 100)
    assert summary["roles"]["web"] == {"processes": 2, "cpu_s": 1.0, "cpu_pct_of_one_core": 1.0, "pss_mib": 3.0}
    assert summary["roles"]["gateway"]["cpu_s"] == 0.12
    assert (summary["cpu_s"], summary["cpu_pct_of_one_core"], summary["processes"]) == (1.12, 1.12, 3)


@pytest.mark.parametrize(
    ("argv", "role"),
    [
        (["/venv/bin/python", "-m", "gunicorn", "config.wsgi"], "web"),
        (["python", "-m", "celery", "-A", "config", "worker", "--hostname=worker@%h"], "worker"),
        (["python", "-m", "celery", "-A", "config", "beat"], "beat"),
        (["python", "-m", "gateway", "--port=8080"], "gateway"),
        (["/x/tritonserver", "--model-repository=/r"], "tritonserver"),
        (["/x/triton_python_backend_stub", "/m/model.py"], "triton-stub"),
        (["python", "manage.py", "run_platform"], "supervisor"),
    ],
)
def test_components_by_command_line(argv, role):
    assert idle.role_of(argv) == role


def test_separate_cores_when_the_host_has_them():
    plan = procs.bench_pinning(list(range(16)))
    assert plan.shared == ""
    assert plan.roles == {"proxy": [0], "backend": list(range(1, 8)), "load": list(range(8, 16))}
    assert "proxy on cores 0" in plan.describe()


def test_three_cores_give_one_each():
    plan = procs.bench_pinning([4, 5, 6])
    assert plan.roles == {"proxy": [4], "backend": [5], "load": [6]}


def test_two_cores_pin_nothing_and_say_so():
    plan = procs.bench_pinning([0, 1])
    assert plan.roles == {} and "2 core(s) for 3 roles" in plan.shared
    assert plan.describe().startswith("not pinned:")
    assert procs.pin_roles(plan, {"proxy": [os.getpid()]}) == {}  # nothing touched


def test_fewer_cores_than_asked_give_one_each_and_the_rest_to_the_last():
    plan = procs.plan_pinning([0, 1, 2, 3], {"proxy": 2, "backend": 2, "load": 2})
    assert plan.roles == {"proxy": [0], "backend": [1], "load": [2, 3]}


def test_pinning_a_real_process_tree():
    import subprocess
    import sys

    cores = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert procs.pin_tree(child.pid, cores[:1]) >= 1
        assert os.sched_getaffinity(child.pid) == set(cores[:1])
    finally:
        child.kill()
        child.wait()
