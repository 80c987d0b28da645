"""/metrics and /status need a token by default: they list every team's
endpoints, internal model names, Triton addresses and per-key traffic."""

import pytest

from gateway.process.settings import Settings


def test_a_gateway_without_a_metrics_token_refuses_to_start(monkeypatch):
    monkeypatch.delenv("GATEWAY_METRICS_TOKEN", raising=False)
    monkeypatch.delenv("GATEWAY_METRICS_OPEN", raising=False)
    with pytest.raises(ValueError, match="GATEWAY_METRICS_TOKEN is not set"):
        Settings.from_env(routes_url="http://127.0.0.1:1/routes")


def test_with_a_token_or_an_explicit_opt_in_it_starts(monkeypatch):
    monkeypatch.delenv("GATEWAY_METRICS_OPEN", raising=False)
    monkeypatch.setenv("GATEWAY_METRICS_TOKEN", "t0ken")
    assert Settings.from_env().metrics_token == "t0ken"
    monkeypatch.delenv("GATEWAY_METRICS_TOKEN")
    monkeypatch.setenv("GATEWAY_METRICS_OPEN", "1")
    settings = Settings.from_env()
    assert settings.metrics_open and settings.metrics_token is None
