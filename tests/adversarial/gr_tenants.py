"""What the generative recommender's adversarial cases share (test_gr_inputs.py,
test_gr_affinity.py): the second tenant's client, and a request body with one input changed."""

from __future__ import annotations

import json
import statistics
import threading
import time

import requests

from registry.gr.triton import request_body


class Neighbour(threading.Thread):
    """The second tenant: five users of recs-b asking again and again (their caches warm)."""

    def __init__(self, url: str, items: list[int]):
        super().__init__(daemon=True)
        self.url, self.items = url, items
        self.stop = threading.Event()
        self.results: list[tuple[int, float, str]] = []

    def run(self):
        with requests.Session() as session:
            turn = 0
            while not self.stop.is_set():
                user = turn % 5
                body = request_body(f"shared-{user}", self.items[user * 7 : user * 7 + 12], top_k=5)
                started = time.monotonic()
                try:
                    reply = session.post(f"{self.url}/v2/models/recs-b/infer", json=body, timeout=10)
                    outputs = {o["name"]: o["data"] for o in reply.json().get("outputs", [])} if reply.ok else {}
                    result = (reply.status_code, time.monotonic() - started, (outputs.get("cache") or [""])[0])
                except (requests.RequestException, ValueError):
                    result = (-1, time.monotonic() - started, "")
                self.results.append(result)
                turn += 1
                time.sleep(0.02)

    def mark(self) -> int:
        return len(self.results)

    def baseline(self, count: int = 25) -> float:
        deadline = time.monotonic() + 30
        while len(self.results) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return statistics.median(latency for _, latency, _ in self.results[:count])

    def check(self, since: int, baseline_p50: float) -> None:
        """The neighbour's replies since `since`: all 200, cached, none over 2 s, and their
        median at most twice the calm median + 25 ms. The calm median is the higher of the
        module's first (`baseline_p50`) and the 25 replies just before `since`: measured in the
        same minute as the attack, so load the whole host shares (other suites' workers) is in
        both, and what is compared is what the attack added."""
        deadline = time.monotonic() + 5
        while len(self.results) < since + 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        window = self.results[since:]
        assert window, "the neighbour made no progress"
        assert all(status == 200 for status, _, _ in window), f"the neighbour was refused: {window[:5]}"
        assert max(latency for _, latency, _ in window) < 2.0
        recent = [latency for _, latency, _ in self.results[max(0, since - 25) : since]]
        calm = max(baseline_p50, statistics.median(recent)) if len(recent) >= 10 else baseline_p50
        during = statistics.median(latency for _, latency, _ in window)
        assert during <= 2 * calm + 0.025, (during, calm, baseline_p50)
        assert {cache for _, _, cache in window} == {"hit"}  # its users stay cached


def with_input(body: dict, name: str, **changes) -> dict:
    body = json.loads(json.dumps(body))
    for tensor in body["inputs"]:
        if tensor["name"] == name:
            tensor.update(changes)
    if name not in {t["name"] for t in body["inputs"]}:
        body["inputs"].append({"name": name, **changes})
    return body
