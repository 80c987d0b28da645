"""Triton python-backend model that serves a generative recommender: a per-user prefix cache,
trie-constrained beam search over semantic ids, the top K items with scores.

Copied into `<model dir>/1/model.py` by registry/gr/triton.py, beside `gr_runtime.py` (the
same beam search the build's gates ran, registry/gr/runtime.py), the variant's graphs
(encode.onnx, extend.onnx, decode.onnx), the catalog version's items.npz and trie.npz, and
serving.json (levels, codes per level, max history, the catalog version).

Inputs (KServe v2): user_id BYTES [1] (the user whose cache to use: printable ASCII
[A-Za-z0-9._:@-], 1..MAX_USER_ID bytes; the gateway's affinity routing hashes the same
value), history INT64 [n] (the user's recent item ids, oldest first, 1..max_request_history;
every id in the catalog), top_k INT32 [1] and beam_width INT32 [1] (optional; 1 <= top_k <=
beam_width <= max_beam_width). Outputs: items INT64 [k], scores FP32 [k] (sum of the codes'
log-probabilities, best first), cache BYTES [1] ("hit" | "grown" | "rebased" | "miss").
A bad request gets one INVALID_ARG error naming the input (HTTP 400); the model keeps serving.

Metrics (Triton's custom metrics, on its /metrics, labels model and version):
gr_cache_lookups_total{result}, gr_cache_bytes, gr_cache_users, gr_cache_evictions_total,
gr_prefill_seconds (histogram), gr_decode_seconds (histogram), gr_prefill_items_total,
gr_beam_width (the last request's), gr_beams_total, gr_items_total, gr_illegal_beams_total,
gr_duplicate_items_total. Rates: hits / lookups, illegal / beams, duplicates / beams.

Config parameters: cache_max_bytes (64 MiB), default_beam_width (32), max_beam_width (128),
default_top_k (10), max_request_history (256), intra_op_threads (1), cache_slack (a quarter
of max history: registry/gr/runtime.plan_prefix).
"""

import json
import os
import re
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gr_runtime  # noqa: E402 - the copy beside this file

MAX_USER_ID = 128
USER_ID_RE = re.compile(rb"^[A-Za-z0-9._:@-]+$")
SECONDS_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
CACHE_RESULTS = ("hit", "grown", "rebased", "miss")


class BadRequest(ValueError):
    pass


def _param(config: dict, key: str, default: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", default) or default


def _input(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _one_int(request, name: str, default: int, low: int, high: int) -> int:
    value = _input(request, name)
    if value is None:
        return default
    if value.size != 1:
        raise BadRequest(f"{name}: send one number, not {value.size}")
    number = int(value.reshape(-1)[0])
    if not low <= number <= high:
        raise BadRequest(f"{name}: {number} is out of range; give {low}..{high}")
    return number


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "serving.json"), encoding="utf-8") as fh:
            serving = json.load(fh)
        graphs = gr_runtime.Graphs(
            {role: os.path.join(version_dir, name) for role, name in gr_runtime.GRAPH_FILES.items()},
            threads=int(_param(config, "intra_op_threads", "1")),
        )
        self.items = gr_runtime.ItemMap.load(os.path.join(version_dir, "items.npz"))
        trie = gr_runtime.Trie.load(os.path.join(version_dir, "trie.npz"))
        max_history = int(serving["max_history"])
        slack = _param(config, "cache_slack", "")
        self.cache = gr_runtime.PrefixCache(int(_param(config, "cache_max_bytes", str(64 << 20))))
        self.recommender = gr_runtime.Recommender(
            graphs,
            trie=trie,
            items=self.items,
            levels=int(serving["levels"]),
            codes_per_level=int(serving["codes_per_level"]),
            max_history=max_history,
            cache=self.cache,
            slack=int(slack) if slack else None,
        )
        self.default_width = int(_param(config, "default_beam_width", "32"))
        self.max_width = int(_param(config, "max_beam_width", "128"))
        self.default_top_k = int(_param(config, "default_top_k", "10"))
        self.max_history_in = int(_param(config, "max_request_history", "256"))
        self.catalog = f"{serving.get('catalog', {}).get('name', '')} c{serving.get('catalog', {}).get('version', '')}"
        self._metrics({"model": args["model_name"], "version": args["model_version"]})
        # Warm: the first live request does not pay ONNX Runtime's first-run allocations.
        self.recommender.serve(None, tuple(self.items.item_ids[:2].tolist()), width=self.default_width, top_k=1)

    def _metrics(self, labels: dict) -> None:
        def family(name, kind, description, **kwargs):
            return pb_utils.MetricFamily(name=name, description=description, kind=kind, **kwargs)

        counter, gauge, histogram = (
            pb_utils.MetricFamily.COUNTER,
            pb_utils.MetricFamily.GAUGE,
            pb_utils.MetricFamily.HISTOGRAM,
        )
        self.families = {
            "lookups": family("gr_cache_lookups_total", counter, "Prefix cache lookups by result"),
            "bytes": family("gr_cache_bytes", gauge, "Bytes the prefix cache holds"),
            "users": family("gr_cache_users", gauge, "Users the prefix cache holds"),
            "evictions": family("gr_cache_evictions_total", counter, "Users evicted from the prefix cache"),
            "prefill": family("gr_prefill_seconds", histogram, "Prefix encode time per request"),
            "decode": family("gr_decode_seconds", histogram, "Beam search time per request"),
            "prefill_items": family("gr_prefill_items_total", counter, "History items encoded"),
            "width": family("gr_beam_width", gauge, "Beam width of the last request"),
            "beams": family("gr_beams_total", counter, "Beams finished"),
            "items": family("gr_items_total", counter, "Items returned"),
            "illegal": family("gr_illegal_beams_total", counter, "Beams whose semantic id no item has"),
            "duplicates": family("gr_duplicate_items_total", counter, "Beams that repeated an item"),
        }
        self.lookups = {r: self.families["lookups"].Metric(labels={**labels, "result": r}) for r in CACHE_RESULTS}
        self.metric = {
            name: self.families[name].Metric(
                labels=labels, **({"buckets": SECONDS_BUCKETS} if name in ("prefill", "decode") else {})
            )
            for name in self.families
            if name != "lookups"
        }

    def _parse(self, request) -> tuple:
        user = _input(request, "user_id")
        if user is None or user.size != 1:
            raise BadRequest("user_id: send one user id (BYTES [1])")
        user = user.reshape(-1)[0]
        user = user if isinstance(user, bytes) else str(user).encode()
        if not 1 <= len(user) <= MAX_USER_ID or not USER_ID_RE.match(user):
            raise BadRequest(f"user_id: 1..{MAX_USER_ID} characters of A-Z a-z 0-9 . _ : @ - (got {len(user)} bytes)")
        history = _input(request, "history")
        if history is None or history.ndim != 1 or not 1 <= history.size <= self.max_history_in:
            size = "none" if history is None else f"shape {list(history.shape)}"
            raise BadRequest(f"history: send 1..{self.max_history_in} item ids (INT64 [n], oldest first), got {size}")
        unknown = [int(i) for i in history.tolist() if int(i) not in self.items.row_of_item]
        if unknown:
            raise BadRequest(f"history: {len(unknown)} item id(s) not in catalog {self.catalog}, e.g. {unknown[0]}")
        width = _one_int(request, "beam_width", min(self.default_width, self.max_width), 1, self.max_width)
        top_k = _one_int(request, "top_k", min(self.default_top_k, width), 1, width)
        return user.decode("ascii"), tuple(int(i) for i in history.tolist()), width, top_k

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                user, history, width, top_k = self._parse(request)
            except BadRequest as error:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error), pb_utils.TritonError.INVALID_ARG))
                )
                continue
            try:
                served = self.recommender.serve(user, history, width=width, top_k=top_k)
            except Exception as error:  # the model's own failure: this request's error, the others go on
                self.cache.drop(user)  # never keep a cache entry a failed request may have left half made
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"recommender: {error}")))
                continue

            self._observe(served, width)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("items", served["items"].astype(np.int64)),
                        pb_utils.Tensor("scores", served["scores"].astype(np.float32)),
                        pb_utils.Tensor("cache", np.array([served["cache"].encode()], dtype=np.object_)),
                    ]
                )
            )
        return responses

    def _observe(self, served: dict, width: int) -> None:
        self.lookups[served["cache"]].increment(1)
        m = self.metric
        m["prefill"].observe(served["prefill_s"])
        m["decode"].observe(served["decode_s"])
        m["prefill_items"].increment(served["encoded"])
        m["width"].set(width)
        m["beams"].increment(served["beams"])
        m["items"].increment(len(served["items"]))
        m["illegal"].increment(served["illegal"])
        m["duplicates"].increment(served["duplicates"])
        m["bytes"].set(self.cache.bytes)
        m["users"].set(len(self.cache.entries))
        m["evictions"].increment(self.cache.evictions - getattr(self, "_evictions_seen", 0))
        self._evictions_seen = self.cache.evictions

    def finalize(self):
        self.metric, self.lookups, self.families = {}, {}, {}
