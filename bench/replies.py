"""python -m bench replies — what naming the endpoint in KServe replies costs the gateway.

The gateway swaps the prefix of Triton's JSON reply `{"model_name":"<triton model>",
"model_version":"1"` for the endpoint's name and the registry version (gateway/kserve/replies.py)
on every 200. This measures `public_reply` on replies shaped as Triton writes them (a CTR
model's FP32 scores for batches of 1, 64 and 1024), next to a bare `startswith` (what
passing the reply untouched would still cost to decide) and to what compressing the same
reply costs (gzip, zlib's default level as Triton uses): the gateway no longer forwards
Accept-Encoding, so Triton no longer spends that per reply and the rewrite stays a
prefix swap. Each figure is the median of 15 repeats of a timed loop. Writes
var/bench/replies.json.

Options: --quick (5 repeats).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import zlib

from bench.common import print_table, write_json
from gateway.kserve.replies import public_reply, reply_prefixes

TRITON_MODEL, ENDPOINT = "ctr-ranker__v12__onnx-int8", "ctr-ranker"


def triton_reply(batch: int) -> bytes:
    scores = [round(0.5 + 0.4 * ((i * 7919) % 1000) / 1000, 6) for i in range(batch)]
    return json.dumps(
        {
            "model_name": TRITON_MODEL,
            "model_version": "1",
            "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [batch, 1], "data": scores}],
        },
        separators=(",", ":"),
    ).encode()


def encoded(data: bytes, encoding: str | None) -> bytes:
    if encoding is None:
        return data
    packer = zlib.compressobj(6, zlib.DEFLATED, 31 if encoding == "gzip" else 15)  # Triton: zlib's default level
    return packer.compress(data) + packer.flush()


def per_call_us(fn, repeats: int) -> float:
    loops = 1
    while True:  # enough loops for ~20 ms per timing
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - start > 0.02:
            break
        loops *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(samples)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench replies")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeats = 5 if args.quick else 15
    reply_from, reply_to = reply_prefixes(ENDPOINT, TRITON_MODEL, "12")
    rows, results = [], []
    for batch in (1, 64, 1024):
        body = triton_reply(batch)
        out, grew = public_reply(body, None, reply_from, reply_to)
        assert out.startswith(reply_to) and json.loads(out)["outputs"] == json.loads(body)["outputs"]
        assert len(out) - len(body) == grew
        rewrite = per_call_us(lambda: public_reply(body, None, reply_from, reply_to), repeats)
        check = per_call_us(lambda: body.startswith(reply_from), repeats)
        gzip = per_call_us(lambda: encoded(body, "gzip"), repeats)
        rows.append([batch, len(body), rewrite, check, gzip])
        results.append(
            {"batch": batch, "reply_bytes": len(body), "rewrite_us": rewrite, "startswith_us": check, "gzip_us": gzip}
        )
    print("KServe reply rewrite (gateway/kserve/replies.py public_reply), median of", repeats, "repeats")
    print_table(["batch", "reply bytes", "rewrite µs", "startswith µs", "gzip it µs"], rows)
    path = write_json("replies", {"repeats": repeats, "results": results})
    print(f"wrote {path}")
    return 0
