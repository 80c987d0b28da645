"""bench/llm_tools.py's pure parts: the tools' command lines (URL, model, tokenizer and the load,
nothing that adapts them to the gateway), their JSON read into one row shape, and the gateway -
direct figures. The JSON under data/llm_tools/ is what aiperf 0.13, guidellm 0.8.1 and genai-perf
0.0.16 wrote through the gateway on this machine (trimmed to the keys read here); the tools
themselves run in `make test-llm-tools` (they need venvs of their own, a few GB)."""

import json
from pathlib import Path

import pytest

from bench import llm_tools
from bench.llm_tools import Run, Target, added, command, parse_aiperf, parse_genai_perf, parse_guidellm, rotated

DATA = Path(__file__).parent / "data" / "llm_tools"
GATEWAY = Target("gateway", "http://127.0.0.1:8080", "bench-openai_server")


def _run(tool: str, tmp_path) -> Run:
    return Run(tool, GATEWAY, streams=4, requests=32, tokenizer="/models/tiny", out=tmp_path)


@pytest.mark.parametrize("tool", llm_tools.TOOLS)
def test_each_tool_is_given_the_url_the_model_and_the_load_only(tool, tmp_path):
    argv = command(_run(tool, tmp_path))
    line = " ".join(argv)
    assert argv[0].endswith(f"/{tool}/bin/{tool}")
    assert "http://127.0.0.1:8080" in line and "bench-openai_server" in line and "/models/tiny" in line
    # nothing that bends a tool to this gateway: no extra body fields, headers or keys
    for adapted in ("--extra-inputs", "--header", "-H", "--api-key", "ignore_eos", "stream_options"):
        assert adapted not in argv and adapted not in line
    assert "4" in line and "32" in line


def test_an_unknown_tool_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown tool"):
        command(_run("locust", tmp_path))


def test_aiperf_json_read():
    row = parse_aiperf(DATA / "aiperf", requested=40)
    assert row["requests"] == 40 and row["errors"] == 0
    assert row["ttft_p50_ms"] == pytest.approx(62.97, abs=0.01)
    assert row["itl_p50_ms"] == pytest.approx(1.52, abs=0.01)
    assert row["requests_per_s"] == pytest.approx(32.5, abs=0.01)


def test_aiperf_errors_are_the_summary_counts(tmp_path):
    data = json.loads((DATA / "aiperf" / "profile_export_aiperf.json").read_text())
    data["error_summary"] = [{"error_details": {"code": 400}, "count": 3}, {"error_details": {"code": 503}, "count": 2}]
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(data))
    assert parse_aiperf(tmp_path, requested=40)["errors"] == 5


def test_genai_perf_json_read_and_missing_requests_are_errors():
    row = parse_genai_perf(DATA / "genai-perf", requested=40)
    assert row["requests"] == 40 and row["errors"] == 0
    assert row["ttft_p99_ms"] == pytest.approx(52.2, abs=0.01)
    assert parse_genai_perf(DATA / "genai-perf", requested=45)["errors"] == 5


def test_guidellm_json_read():
    row = parse_guidellm(DATA / "guidellm", requested=40)
    assert row["requests"] == 40 and row["errors"] == 0
    assert row["ttft_p50_ms"] == pytest.approx(12.45, abs=0.01)
    assert row["itl_p99_ms"] == pytest.approx(4.39, abs=0.01)


def test_a_tool_that_wrote_nothing_fails_its_parse(tmp_path):
    for parse in (parse_aiperf, parse_genai_perf, parse_guidellm):
        with pytest.raises((StopIteration, OSError)):
            parse(tmp_path, requested=8)


def test_added_is_gateway_minus_direct_per_tool_and_streams():
    rows = [
        {"tool": "aiperf", "target": "direct", "streams": 4, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0, "itl_p50_ms": 1.0, "itl_p99_ms": 2.0},
        {"tool": "aiperf", "target": "gateway", "streams": 4, "ttft_p50_ms": 10.5, "ttft_p99_ms": 23.0, "itl_p50_ms": 1.1, "itl_p99_ms": 2.0},
        {"tool": "aiperf", "target": "triton", "streams": 4, "ttft_p50_ms": 5.0, "ttft_p99_ms": 9.0, "itl_p50_ms": 0.5, "itl_p99_ms": 1.0},
        {"tool": "guidellm", "target": "gateway", "streams": 4, "ttft_p50_ms": 11.0},  # its direct run failed
    ]  # fmt: skip
    assert added(rows) == [
        {"tool": "aiperf", "streams": 4, "ttft_p50_ms": 0.5, "ttft_p99_ms": 3.0, "itl_p50_ms": 0.1, "itl_p99_ms": 0.0}
    ]


def test_the_order_rotates_with_the_concurrency():
    targets = [Target("direct", "a", "m"), GATEWAY, Target("triton", "b", "m")]
    firsts = {rotated(targets, n)[0].label for n in range(3)}
    assert firsts == {"direct", "gateway", "triton"}


def test_missing_tools_are_said_and_check_fails_without_starting_anything(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(llm_tools, "TOOLS_DIR", tmp_path)
    assert llm_tools.main(["--check"]) == 1
    assert "not installed, skipped: aiperf, guidellm, genai-perf" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        llm_tools.main(["--tools", "aiperf,locust"])


def test_only_failures_of_the_gateway_count():
    ok = {"exit": 0, "errors": 0, "requests": 8}
    refused = {"exit": 0, "errors": 8, "requests": 0}
    rows = [
        {"tool": "guidellm", "target": "direct", "streams": 1, **refused},  # the server refuses the tool
        {"tool": "guidellm", "target": "gateway", "streams": 1, **refused},  # and the gateway says so
        {"tool": "guidellm", "target": "triton", "streams": 1, **ok},
        {"tool": "aiperf", "target": "direct", "streams": 1, **ok},
        {"tool": "aiperf", "target": "gateway", "streams": 1, **refused},  # the gateway's failure
        {"tool": "aiperf", "target": "triton", "streams": 1, "exit": 1, "failed": "no result"},
    ]
    failed = llm_tools.failures(rows)
    assert [(r["tool"], r["target"]) for r in failed] == [("aiperf", "gateway"), ("aiperf", "triton")]
    assert rows[1]["note"] == "failed on the server directly too"


def test_a_run_with_no_success_has_no_figures(tmp_path):
    data = json.loads((DATA / "guidellm" / "guidellm.json").read_text())
    data["benchmarks"][0]["metrics"]["request_totals"] = {"successful": 0, "errored": 8, "incomplete": 0, "total": 8}
    (tmp_path / "guidellm.json").write_text(json.dumps(data))
    row = parse_guidellm(tmp_path, requested=8)
    assert row["errors"] == 8 and row["ttft_p50_ms"] is None and row["requests_per_s"] is None
    assert added([{"tool": "guidellm", "target": "gateway", "streams": 1, **row}]) == []


def test_cpu_seconds_reads_this_process_in_nanoseconds():
    import os

    before = llm_tools.cpu_seconds([os.getpid()])
    sum(i * i for i in range(200_000))
    spent = llm_tools.cpu_seconds([os.getpid()]) - before
    assert 0 < spent < 5 and spent != round(spent, 2)  # finer than a 10 ms tick
