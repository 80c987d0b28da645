"""The CLI's parts that need no server: its config file, URL and step parsing, progress
output on a terminal and off it, the exit codes docs/cli.md documents, and that it is
installable on its own (a wheel with only the CLI, importing no Django)."""

import io
import re
import shutil
import stat
import subprocess
import sys
import zipfile

import click
import pytest

from modelplane_cli import config, exits, output
from modelplane_cli.client import origin
from modelplane_cli.commands.rollouts import parse_steps
from modelplane_cli.exits import CliError
from modelplane_cli.watch import arms_of, event_line, panel_lines, state_text, verdict_line
from tests.cli.conftest import ROOT


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("XDG_CONFIG_HOME", "MODELPLANE_URL", "MODELPLANE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_config_is_private_and_the_environment_overrides_it(home, monkeypatch):
    path = config.write_file({"url": "http://stored:8000", "token": "stored-token"})
    assert path == home / ".config" / "modelplane" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    settings, warnings = config.resolve(url=None, token=None)
    assert (settings.url, settings.token, warnings) == ("http://stored:8000", "stored-token", [])
    monkeypatch.setenv("MODELPLANE_URL", "https://env.example/api/v1/")
    monkeypatch.setenv("MODELPLANE_TOKEN", "env-token")
    settings, _ = config.resolve(url=None, token=None)
    assert (settings.url, settings.token, settings.token_from) == (
        "https://env.example",
        "env-token",
        "MODELPLANE_TOKEN",
    )
    settings, _ = config.resolve(url="http://flag:1", token="flag-token")
    assert (settings.url, settings.token, settings.url_from) == ("http://flag:1", "flag-token", "--url")
    path.chmod(0o644)
    assert "readable by others" in config.resolve(url=None, token=None)[1][0]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    assert config.config_path() == home / "xdg" / "modelplane" / "config.json"


def test_urls_and_steps_are_checked():
    assert config.normalize_url(" http://h:8000/ ") == "http://h:8000"
    assert config.normalize_url("https://h/prefix/api/v1") == "https://h/prefix"
    for bad in ("h:8000", "ftp://h", "http://", ""):
        with pytest.raises(CliError) as caught:
            config.normalize_url(bad)
        assert caught.value.exit_code == exits.USAGE
    assert parse_steps("5,25,50,100") == [500, 2500, 5000, 10000]
    assert parse_steps("0.5, 100") == [50, 10000]
    for bad in ("50,25", "0,100", "5,150", "five", "", "5,5"):
        with pytest.raises(CliError) as caught:
            parse_steps(bad)
        assert caught.value.exit_code == exits.USAGE and "--steps" in caught.value.message


def test_pick_follows_dotted_paths():
    data = {"id": 7, "artifacts": [{"id": 3, "variant": "onnx-int8"}]}
    assert output.pick(data, "artifacts.0.variant") == "onnx-int8" and output.pick(data, "id") == 7
    with pytest.raises(CliError, match="no 'nope'"):
        output.pick(data, "artifacts.0.nope")
    with pytest.raises(CliError):
        output.pick(data, "artifacts.5.id")


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_progress_redraws_on_a_terminal_and_prints_lines_elsewhere(monkeypatch, tty):
    stream = _Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    out = output.Output(as_json=False)
    out.status("build 1 " + output.bar(0.25))
    out.event("  stage canonicalize succeeded in 0.4s")
    out.status("build 1 " + output.bar(0.5))
    out.clear_status()
    text = stream.getvalue()
    if tty:
        assert "\r\x1b[2Kbuild 1 [######------------------]  25%" in text and text.count("\r\x1b[2K") == 4
    else:
        assert text == "  stage canonicalize succeeded in 0.4s\n"


def test_a_state_change_reads_as_a_move_and_other_actions_are_named():
    steps = [1000, 10000]
    moved = {"time": "2026-11-23T10:00:00Z", "from_state": "canary[0]", "to_state": "canary[1]", "reason": "passed"}
    for action in ("status_changed", "transition"):  # "transition": what older servers wrote
        line = event_line({**moved, "action": action}, steps)
        assert "canary step 1/2 (10%) → canary step 2/2 (100%)" in line and action not in line, line
    assert "baseline_unavailable: canary step 1/2" in event_line({**moved, "action": "baseline_unavailable"}, steps)


def test_rollout_lines_count_steps_from_one():
    assert state_text("canary[0]", [500, 2500, 10000]) == "canary step 1/3 (5%)"
    assert state_text("rolling_back", [500]) == "rolling_back"
    line = verdict_line(
        {
            "created_at": "2026-11-23T10:00:00Z",
            "outcome": "inconclusive",
            "step": 1,
            "reason": "waiting for evidence: latency",
            "checks": [{"name": "latency", "outcome": "inconclusive"}, {"name": "error_rate", "outcome": "pass"}],
        },
        [500, 2500, 10000],
    )
    line = click.unstyle(line)  # the outcome is coloured (click strips colours when not a terminal)
    assert re.search(
        r"judge inconclusive  step 2/3 \(25%\)  latency=wait error_rate=pass  waiting for evidence: latency$", line
    ), line


def test_exit_codes_are_the_ones_the_docs_document():
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    documented = re.findall(r"^\| `(\d+)` \| ([a-z-]+) \|", section, flags=re.M)
    assert [(int(code), name) for code, name in documented] == [(code, name) for code, name, _ in exits.TABLE]
    assert len({code for code, _, _ in exits.TABLE}) == len(exits.TABLE)


def test_the_cli_imports_no_django():
    probe = (
        "import sys, modelplane_cli.main; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'celery', 'config', "
        "'registry', 'deployments', 'monitoring', 'experiments', 'gateway', 'numpy'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr


@pytest.mark.integration
def test_the_wheel_installs_the_cli_and_nothing_else(tmp_path):
    """`pip install` of the project puts `modelplane` on PATH and makes only modelplane_cli
    importable (the Django apps run from the checkout; platform/ never shadows the stdlib)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("modelplane_cli", "registry", "config", "platform"):  # apps present: they must not be picked up
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("modelplane-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"modelplane_cli"}, packages
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "modelplane = modelplane_cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    assert {"modelplane_cli/commands/rollouts.py", "modelplane_cli/__main__.py"} <= set(names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "Requires-Dist: click" in metadata and "Requires-Dist: requests-toolbelt" in metadata


def test_origins_compare_scheme_host_and_port_with_default_ports():
    assert origin("http://Example.com/api/v1/") == origin("http://example.com:80/x") == ("http", "example.com", 80)
    assert origin("https://example.com") != origin("http://example.com")
    assert origin("http://example.com:8000") != origin("http://example.com")
    assert origin("http://user:pw@evil.example/") == ("http", "evil.example", 80)


def test_the_live_view_shows_the_apis_arms_when_it_has_them_else_the_split():
    rollout = {
        "id": 4,
        "endpoint": "ctr",
        "state": "canary",
        "step_index": 0,
        "steps_bp": [2000, 10000],
        "generation": 5,
        "baseline_variant": "v1-onnx-fp32",
        "candidate_variant": "v2-onnx-fp32",
        "fair_baseline": {"variant": "v1-onnx-fp32-baseline"},
        "traffic": {"stable_bp": 6000, "candidate_bp": 2000, "baseline_bp": 2000, "candidate_role": "canary"},
    }
    assert [(a["role"], a["weight_bp"]) for a in arms_of(rollout)] == [
        ("stable", 6000),
        ("baseline", 2000),
        ("candidate", 2000),
    ]
    given = [
        {"role": "stable", "variant": "v1", "weight_bp": 6000},
        {"role": "baseline", "variant": "v1-b", "weight_bp": 2000},
        {"role": "candidate", "variant": "v2", "weight_bp": 2000},
    ]
    lines = panel_lines({"rollout": {**rollout, "arms": given}, "verdicts": []}, None)
    assert lines[0] == "rollout #4 ctr · canary step 1/2 (20%) · gen 5"
    assert [line.split() for line in lines[1:4]] == [
        ["stable", "v1", "60%"],
        ["baseline", "v1-b", "20%"],
        ["candidate", "v2", "20%"],
    ]
    assert lines[4] == "guardrails: no verdict yet"


def test_a_cut_line_keeps_its_colours_closed():
    red = click.style("fail", fg="red")
    assert output._cut("judge " + red + " and more", 8) == "judge " + "\x1b[31mfa\x1b[0m"
    assert output._cut("plain text", 5) == "plain"
