"""Training datasets built from an endpoint's captured requests and their clicks: list, get
(`show` is the same), build. `modelplane datasets …` is the same group."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from modelplane_cli.commands.common import list_options, show_page
from modelplane_cli.output import fields, when
from modelplane_cli.state import json_option, pass_state

DATASET_COLUMNS = [
    ("id", "id"),
    ("name", "name"),
    ("version", "version"),
    ("endpoint", "endpoint"),
    ("rows", "statistics.rows"),
    ("label rate", "statistics.label_rate"),
    ("from", "window_start"),
    ("to", "window_end"),
    ("created", "created_at"),
]
BUILD_TIMEOUT_S = 120.0  # the server may wait for the process that owns the store


class When(click.ParamType):
    """An ISO time, or `-90m` / `-3h` / `-2d` before now (sent as an ISO time in UTC)."""

    name = "TIME|-3h"
    units = {"m": "minutes", "h": "hours", "d": "days"}

    def convert(self, value, param, ctx):
        text = str(value).strip()
        if text.startswith("-") and text[-1:] in self.units and text[1:-1].isdigit():
            return (datetime.now(UTC) - timedelta(**{self.units[text[-1]]: int(text[1:-1])})).isoformat()
        try:
            datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"give an ISO time (2026-11-29T10:00:00Z) or -90m / -3h / -2d, not {text!r}", param, ctx)
        return text


@click.group()
def dataset():
    """Training datasets of your teams: an endpoint's captured requests joined with their clicks."""


@dataset.command("list")
@click.option("--endpoint", help="Only this endpoint's datasets.")
@click.option("--name", help="Only this dataset's versions.")
@list_options
@json_option
@pass_state
def dataset_list(state, endpoint, name, page, page_size, everything):
    """Dataset versions of your teams, newest first."""
    body = state.api.page(
        "datasets/", everything=everything, endpoint=endpoint, name=name, page=page, page_size=page_size
    )
    show_page(state, body, DATASET_COLUMNS, empty="No datasets.")


def _get(state, dataset_id):
    state.out.result(state.api.get(f"datasets/{dataset_id}/"), dataset_text)


@dataset.command("get")
@click.argument("dataset_id")
@json_option
@pass_state
def dataset_get(state, dataset_id):
    """One dataset version: lineage, statistics, schema and the versions trained on it."""
    _get(state, dataset_id)


@dataset.command("show", hidden=True)
@click.argument("dataset_id")
@json_option
@pass_state
def dataset_show(state, dataset_id):
    """The same as `get`."""
    _get(state, dataset_id)


@dataset.command("build")
@click.argument("endpoint_name")
@click.argument("name")
@click.option("--start", type=When(), required=True, help="Captured requests from this time (ISO, or -3h).")
@click.option("--end", type=When(), required=True, help="To this time; its attribution window must have closed.")
@click.option("--experiment", help="Only this experiment's requests, within its attribution window (exp-12).")
@json_option
@pass_state
def dataset_build(state, endpoint_name, name, start, end, experiment):
    """Build the next version of NAME from ENDPOINT_NAME's captured requests in [start, end)."""
    body = {"endpoint": endpoint_name, "name": name, "start": start, "end": end}
    if experiment:
        body["experiment"] = experiment
    state.api.timeout = max(state.api.timeout, BUILD_TIMEOUT_S)
    built = state.api.post("datasets/", body)
    state.out.result(built, lambda d: f"Dataset {d['id']}: {d['name']} v{d['version']}.\n" + dataset_text(d))


def dataset_text(d: dict) -> str:
    stats, lineage = d.get("statistics") or {}, d.get("lineage") or {}
    mix = ", ".join(f"{k} {v * 100:.1f}%" for k, v in (stats.get("variant_mix") or {}).items())
    features = ", ".join(
        f"{n} {r.get('shape')} [{r.get('min'):.3g}, {r.get('max'):.3g}]"
        for n, r in (stats.get("feature_ranges") or {}).items()
    )
    versions = ", ".join(f"{v.get('model')} v{v.get('version')} (id {v.get('id')})" for v in d.get("versions") or [])
    rate = stats.get("label_rate")
    return fields(
        [
            ("dataset", f"{d.get('id')} ({d.get('name')} v{d.get('version')})"),
            ("endpoint", d.get("endpoint")),
            ("experiment", d.get("experiment")),
            (
                "window",
                f"{when(d.get('window_start'))} to {when(d.get('window_end'))}, split at {when(d.get('split_at'))}",
            ),
            ("attribution", f"{d.get('attribution_window_s')} s"),
            (
                "rows",
                f"{stats.get('rows')} ({stats.get('train_rows')} train, {stats.get('valid_rows')} valid)",
            ),
            ("label rate", f"{rate:.4f}" if isinstance(rate, (int, float)) else None),
            ("served", mix or None),
            ("serving versions", ", ".join(lineage.get("serving_versions") or []) or None),
            ("features", features or None),
            ("mlflow run", d.get("mlflow_run_id") or None),
            ("trained", versions or "no version yet"),
        ]
    )


COMMANDS = [dataset]
ALIASES = {"datasets": "dataset"}
