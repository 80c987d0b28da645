"""Models, versions and aliases: register a model, upload an ONNX file or link an MLflow model
as a version, list and get both; point an alias (`@champion`) at a version, move it, delete
it, and resolve a model URI as the API does."""

from __future__ import annotations

import json
from pathlib import Path

import click

from modelplane_cli.commands.common import key_values, list_options, segment, show_page, size
from modelplane_cli.output import bar, fields, table, when
from modelplane_cli.state import json_option, pass_state

MODEL_COLUMNS = [
    ("name", "name"),
    ("team", "team"),
    ("task", "task"),
    ("versions", "version_count"),
    ("latest", "latest_version"),
    ("updated", "updated_at"),
]
VERSION_COLUMNS = [
    ("id", "id"),
    ("model", "model"),
    ("version", "version"),
    ("status", "status"),
    ("source", "source"),
    ("framework", "framework"),
    ("metrics", "metrics"),
    ("created", "created_at"),
]


# --- models --------------------------------------------------------------------------------
@click.group()
def model():
    """Registered models."""


@model.command("list")
@click.option("--name", help="Names containing this.")
@click.option("--team", help="Only this team's models.")
@click.option("--task", help="ctr, ranking, …")
@list_options
@json_option
@pass_state
def model_list(state, name, team, task, page, page_size, everything):
    """Models of your teams."""
    show_page(
        state,
        state.api.page(
            "models/", everything=everything, name=name, team=team, task=task, page=page, page_size=page_size
        ),
        MODEL_COLUMNS,
        empty="No models.",
    )


@model.command("get")
@click.argument("name")
@json_option
@pass_state
def model_get(state, name):
    """One model."""
    body = state.api.get(f"models/{segment(name)}/")
    state.out.result(
        body,
        lambda m: fields(
            [
                ("name", m.get("name")),
                ("team", m.get("team")),
                ("task", m.get("task")),
                ("description", m.get("description")),
                ("versions", m.get("version_count")),
                ("latest version", m.get("latest_version")),
                ("created by", m.get("created_by")),
                ("created", when(m.get("created_at"))),
                ("updated", when(m.get("updated_at"))),
            ]
        ),
    )


@model.command("create")
@click.argument("name")
@click.option("--team", required=True, help="A team you are a developer (or more) in.")
@click.option("--task", default=None, help="ctr (default), ranking, …")
@click.option("--description", default=None)
@json_option
@pass_state
def model_create(state, name, team, task, description):
    """Register a model."""
    body = {"name": name, "team": team}
    if task:
        body["task"] = task
    if description is not None:
        body["description"] = description
    created = state.api.post("models/", body)
    state.out.result(created, lambda m: f"Registered model {m['name']} in team {m['team']}.")


# --- versions ------------------------------------------------------------------------------
@click.group()
def version():
    """Versions of a model: upload an ONNX file or link an MLflow model."""


@version.command("list")
@click.argument("model_name")
@click.option("--status")
@list_options
@json_option
@pass_state
def version_list(state, model_name, status, page, page_size, everything):
    """Versions of a model, newest first."""
    show_page(
        state,
        state.api.page(
            f"models/{segment(model_name)}/versions/",
            everything=everything,
            status=status,
            page=page,
            page_size=page_size,
        ),
        VERSION_COLUMNS,
        empty="No versions.",
    )


@version.command("get")
@click.argument("version_id", type=int)
@json_option
@pass_state
def version_get(state, version_id):
    """One version (by id) with its signature."""
    state.out.result(state.api.get(f"versions/{version_id}/"), _version_text)


@version.command("upload")
@click.argument("model_name")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path))
@click.option(
    "--metric", "metrics", multiple=True, metavar="KEY=NUMBER", help="A training metric, e.g. auc=0.74 (repeatable)."
)
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="A tag (repeatable).")
@json_option
@pass_state
def version_upload(state, model_name, file, metrics, tags):
    """Upload an ONNX file as the model's next version (the signature is read from the graph)."""
    from requests_toolbelt import MultipartEncoder, MultipartEncoderMonitor

    parts = {}
    if metrics:
        parts["metrics"] = json.dumps(key_values(metrics, "--metric", numbers=True))
    if tags:
        parts["tags"] = json.dumps(key_values(tags, "--tag", numbers=False))
    file_size = file.stat().st_size
    out = state.out
    api = state.api
    with open(file, "rb") as handle:
        parts["file"] = (file.name, handle, "application/octet-stream")
        encoder = MultipartEncoder(fields=parts)
        marks = {"next": 0.25}

        def progress(monitor):
            fraction = monitor.bytes_read / max(1, encoder.len)
            out.status(f"uploading {file.name} {bar(fraction)} {size(monitor.bytes_read)} of {size(encoder.len)}")
            if (
                not out.tty and fraction >= marks["next"] and file_size >= 8 * 1024 * 1024
            ):  # big files: a line per quarter
                out.event(f"uploading {file.name}: {fraction * 100:.0f}% of {size(file_size)}")
                marks["next"] += 0.25

        monitor = MultipartEncoderMonitor(encoder, progress)
        created = api.request(
            "POST",
            f"models/{segment(model_name)}/versions/",
            data=monitor,
            headers={"Content-Type": monitor.content_type},
        )
    out.clear_status()
    out.result(
        created,
        lambda v: f"Uploaded {file.name} as {v['model']} version {v['version']} (id {v['id']}).\n" + _version_text(v),
    )


@version.command("link")
@click.argument("model_name")
@click.argument("source_uri")
@click.option("--metric", "metrics", multiple=True, metavar="KEY=NUMBER", help="A metric to record (repeatable).")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE")
@json_option
@pass_state
def version_link(state, model_name, source_uri, metrics, tags):
    """Register an MLflow model (runs:/<run_id>/<path> or models:/<name>/<version|@alias>) as a version."""
    body = {"source_uri": source_uri}
    if metrics:
        body["metrics"] = key_values(metrics, "--metric", numbers=True)
    if tags:
        body["tags"] = key_values(tags, "--tag", numbers=False)
    created = state.api.post(f"models/{segment(model_name)}/versions/", body)
    state.out.result(
        created,
        lambda v: f"Linked {source_uri} as {v['model']} version {v['version']} (id {v['id']}).\n" + _version_text(v),
    )


@version.command("llm-backend")
@click.argument("model_name")
@click.option("--base-url", required=True, help="The OpenAI-compatible server's base URL, e.g. http://host:8000/v1.")
@click.option("--upstream-model", required=True, help="The model id the server serves.")
@click.option("--secret", default=None, help="A provider secret of the model's team (its bearer key), by name.")
@click.option("--context-length", type=int, default=None, help="Tokens (default 4096).")
@click.option("--cost-prompt", type=float, default=0.0, help="Price per 1,000 prompt tokens.")
@click.option("--cost-completion", type=float, default=0.0, help="Price per 1,000 completion tokens.")
@json_option
@pass_state
def version_llm_backend(
    state, model_name, base_url, upstream_model, secret, context_length, cost_prompt, cost_completion
):
    """Register an LLM backend reference (an OpenAI-compatible server or provider) as a version of an LLM model."""
    body = {
        "base_url": base_url,
        "upstream_model": upstream_model,
        "cost_per_1k_prompt": cost_prompt,
        "cost_per_1k_completion": cost_completion,
    }
    if secret:
        body["secret"] = secret
    if context_length is not None:
        body["context_length"] = context_length
    created = state.api.post(f"models/{segment(model_name)}/llm-versions/", body)
    state.out.result(
        created,
        lambda v: (
            f"Registered {base_url} ({upstream_model}) as {v['model']} version {v['version']} "
            f"(id {v['id']}, artifact {v['artifact']}).\n" + _version_text(v)
        ),
    )


@version.command("llm-upload")
@click.argument("model_name")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path))
@click.option("--context-length", type=int, default=None, help="Default and upper bound: config.json's.")
@json_option
@pass_state
def version_llm_upload(state, model_name, archive, context_length):
    """Upload a model directory archive (.tar.gz/.tgz/.tar/.zip of a Hugging Face format
    directory with safetensors weights) as the next version of an LLM model."""
    from requests_toolbelt import MultipartEncoder

    parts = {} if context_length is None else {"context_length": str(context_length)}
    with open(archive, "rb") as handle:
        parts["archive"] = (archive.name, handle, "application/octet-stream")
        encoder = MultipartEncoder(fields=parts)
        created = state.api.request(
            "POST",
            f"models/{segment(model_name)}/llm-versions/",
            data=encoder,
            headers={"Content-Type": encoder.content_type},
        )
    state.out.result(
        created,
        lambda v: (
            f"Uploaded {archive.name} as {v['model']} version {v['version']} "
            f"(id {v['id']}, artifact {v['artifact']}).\n" + _version_text(v)
        ),
    )


# --- aliases -------------------------------------------------------------------------------
ALIAS_COLUMNS = [
    ("alias", "alias"),
    ("version", "version"),
    ("id", "version_id"),
    ("uri", "uri"),
    ("by", "updated_by"),
    ("updated", "updated_at"),
]


@click.group()
def alias():
    """Version aliases (MLflow's @champion / @challenger): models:/NAME@ALIAS wherever an id goes."""


@alias.command("list")
@click.argument("model_name")
@json_option
@pass_state
def alias_list(state, model_name):
    """A model's aliases and the versions they name."""
    rows = state.api.get(f"models/{segment(model_name)}/aliases/")
    state.out.result(rows, lambda data: table(data, ALIAS_COLUMNS, empty=f"{model_name} has no aliases."))


@alias.command("set")
@click.argument("model_name")
@click.argument("alias_name", metavar="ALIAS")
@click.argument("version_number", metavar="VERSION", type=click.IntRange(min=1))
@json_option
@pass_state
def alias_set(state, model_name, alias_name, version_number):
    """Point ALIAS at VERSION (a version number) of MODEL_NAME, or move it there (an audit event either way)."""
    row = state.api.post(f"models/{segment(model_name)}/aliases/", {"alias": alias_name, "version": version_number})
    state.out.result(row, lambda a: f"{a['uri']} -> version {a['version']} (id {a['version_id']}).")


@alias.command("delete")
@click.argument("model_name")
@click.argument("alias_name", metavar="ALIAS")
@json_option
@pass_state
def alias_delete(state, model_name, alias_name):
    """Delete ALIAS of MODEL_NAME (the version stays)."""
    state.api.request("DELETE", f"models/{segment(model_name)}/aliases/{segment(alias_name)}/")
    state.out.result(
        {"model": model_name, "alias": alias_name, "deleted": True},
        lambda _: f"Deleted models:/{model_name}@{alias_name}.",
    )


@alias.command("resolve")
@click.argument("uri", metavar="MODEL_URI")
@json_option
@pass_state
def alias_resolve(state, uri):
    """The version a model URI names (models:/NAME@ALIAS or models:/NAME/VERSION), as rollouts resolve it."""
    state.out.result(state.api.get("versions/resolve/", uri=uri), _version_text)


def _version_text(v: dict) -> str:
    signature = v.get("signature") or {}
    tensors = [f"{t.get('name')} {t.get('dtype')} {t.get('shape')}" for t in signature.get("inputs", [])]
    outputs = [f"{t.get('name')} {t.get('dtype')} {t.get('shape')}" for t in signature.get("outputs", [])]
    return fields(
        [
            ("id", v.get("id")),
            ("model", v.get("model")),
            ("version", v.get("version")),
            ("status", v.get("status")),
            ("source", v.get("source_uri") or v.get("original_filename") or v.get("source")),
            ("framework", v.get("framework")),
            *([("llm", f"{v['llm']['kind']}, context {v['llm']['context_length']}")] if v.get("llm") else []),
            ("inputs", "; ".join(tensors)),
            ("outputs", "; ".join(outputs)),
            ("aliases", v.get("aliases")),
            ("metrics", v.get("metrics")),
            ("created", when(v.get("created_at"))),
        ]
    )


COMMANDS = [model, version, alias]
