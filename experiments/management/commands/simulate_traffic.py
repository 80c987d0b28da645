"""Drive an endpoint with simulated users and clicks from the reference data's ground truth.

    manage.py simulate_traffic --endpoint demo-ctr --seconds 120 --users 2000 --k 10

Each request: a user (X-User-Id, so the gateway's sticky hash picks the arm) asks to rank
`k` items drawn from the reference click-log generator; the served model's top item is
shown and clicked with its true probability (experiments/traffic.py). Clicks are
sent back as feedback (POST /v2/feedback on the gateway): in batches by request id with --key
(a team's backend), or, without a key, each click on its own citing its reply's
X-Exposure-Token where the experiment accepts them, as a user's browser would (a batch without
a key carries one unit's feedback; a click on a reply without a token, before an experiment
runs, is counted but not sent). A better-trained candidate therefore earns a true lift;
progress is printed every 5 s.

With --gr the endpoint is a generative recommender (docs/generative-recommendation.md): each
request sends a simulated user's recent history (its `user_id` keeps its arm and its replica),
and the user clicks when the item it goes on to consume, drawn from the synthetic world's true
next-item distribution, is among the `k` items recommended (experiments/traffic.GrUsers). Its
world must be the served model's: `--gr tiny` for `train_gr_model --tiny`, else `--gr default`
with the same `--items`.
"""

import json
import time

import numpy as np
import requests
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from experiments.reference import data
from experiments.traffic import GrUsers, show_and_click, true_click_probability


class Command(BaseCommand):
    help = "Send simulated ranking traffic through the gateway and click feedback drawn from the ground truth."

    def add_arguments(self, parser):
        parser.add_argument("--endpoint", default="demo-ctr")
        parser.add_argument("--gateway", default=f"http://127.0.0.1:{getattr(settings, 'GATEWAY_PORT', 8080)}")
        parser.add_argument("--seconds", type=float, default=60.0)
        parser.add_argument("--users", type=int, default=2000)
        parser.add_argument("--k", type=int, default=10, help="Items ranked per request.")
        parser.add_argument("--key", default="", help="Inference key when the endpoint is not public.")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--gr",
            choices=("tiny", "default"),
            default="",
            help="The endpoint is a generative recommender trained on this world (train_gr_model's --tiny or not).",
        )
        parser.add_argument("--items", type=int, default=1000, help="--gr default: the world's items (as trained).")

    def handle(self, *args, endpoint, gateway, seconds, users, k, key, seed, gr="", items=1000, **options):
        if not settings.EXPOSURE_STREAM_URL:
            self.stderr.write(
                "warning: no EXPOSURE_STREAM_URL in these settings: a gateway started with them logs no "
                "exposures, so an experiment counts none of this traffic (make run needs "
                "CELERY_BROKER_URL=redis://… or EXPOSURE_STREAM_URL=redis://… for experiments)"
            )
        rng = np.random.default_rng(seed)
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        traffic = _Recommending(gr, items, users, seed, k) if gr else _Ranking(users, seed, k)
        sent = clicks = errors = unsent = refused = 0
        refusals: dict[int, int] = {}  # clicks the gateway refused, by status
        statuses: dict[int, int] = {}  # error replies by status, said in the progress lines
        pending: list[dict] = []
        later: list[tuple[float, list[dict]]] = []  # (when, one unit's batch) refused with 503: sent again
        per_arm: dict[str, list[int]] = {}
        t_end = time.monotonic() + seconds
        t_report = time.monotonic() + 5
        with requests.Session() as session:
            while time.monotonic() < t_end:
                user, body, clicked_in = traffic.request(rng)
                try:
                    r = session.post(
                        f"{gateway}/v2/models/{endpoint}/infer",
                        data=json.dumps(body),
                        headers={**headers, "X-User-Id": user},
                        timeout=5,
                    )
                except requests.RequestException as exc:
                    raise CommandError(f"gateway unreachable at {gateway}: {exc}") from None
                sent += 1
                if r.status_code != 200:
                    errors += 1
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    continue
                clicked = clicked_in(r.json(), rng)
                arm = per_arm.setdefault(r.headers.get("X-Model-Variant", "?"), [0, 0])
                arm[0] += 1
                if clicked:
                    arm[1] += 1
                    clicks += 1
                    click = {"event_id": f"sim-{seed}-{r.headers['X-Request-Id']}", "type": "click"}
                    token = r.headers.get("X-Exposure-Token")
                    if key:
                        click["request_id"] = r.headers["X-Request-Id"]
                    elif token:  # no key: the experiment accepts the replies' signed exposure tokens
                        click["exposure_token"] = token
                    else:  # no key and no token (no experiment running yet): nobody may take this click
                        unsent += 1
                        click = None
                    if click:
                        pending.append(click)
                # with a key, batches of many users; without one, each user's click is its own batch
                if pending and (not key or len(pending) >= 200 or time.monotonic() >= t_report):
                    refused += self._send(
                        session, f"{gateway}/v2/feedback", endpoint, headers, pending, later, refusals
                    )
                    pending = []
                later, refused = self._resend(session, f"{gateway}/v2/feedback", endpoint, headers, later, refused)
                if time.monotonic() >= t_report:
                    t_report += 5
                    arms = ", ".join(f"{a}: {n} req, CTR {c / n:.3f}" for a, (n, c) in sorted(per_arm.items()) if n)
                    self.stdout.write(
                        f"{sent} requests ({errors} errors{_by_status(statuses)}), {clicks} clicks — {arms}"
                    )
            if pending:
                session.post(
                    f"{gateway}/v2/feedback", json={"endpoint": endpoint, "events": pending}, headers=headers, timeout=5
                )
            deadline = time.monotonic() + 15
            while later and time.monotonic() < deadline:
                time.sleep(0.2)
                later, refused = self._resend(session, f"{gateway}/v2/feedback", endpoint, headers, later, refused)
            refused += sum(len(batch) for _, batch in later)
        self.stdout.write(
            self.style.SUCCESS(
                f"done: {sent} requests, {errors} errors{_by_status(statuses)}, {clicks} clicks"
                + (f" ({unsent} not sent: no key, and their replies carried no exposure token)" if unsent else "")
                + (f"; {refused} refused{_by_status(refusals)}" if refused else "")
            )
        )

    def _send(self, session, url: str, endpoint: str, headers: dict, pending: list, later: list, refusals: dict) -> int:
        """POST the pending clicks; the clicks refused for good (counted by status). Without a key a
        503 (the source's backlog is full) is sent again a second later, click by click."""
        fb = session.post(url, json={"endpoint": endpoint, "events": pending}, headers=headers, timeout=5)
        if fb.status_code == 503 and "Authorization" not in headers:
            later += [(time.monotonic() + 1.0, [event]) for event in pending]
            return 0
        if fb.status_code == 202:
            return 0
        # e.g. the experiment ended and its tokens are no longer accepted: say it, go on
        if fb.status_code not in refusals:
            self.stderr.write(f"feedback refused ({fb.status_code}): {fb.text[:300]}")
        refusals[fb.status_code] = refusals.get(fb.status_code, 0) + len(pending)
        return len(pending)

    @staticmethod
    def _resend(session, url: str, endpoint: str, headers: dict, later: list, refused: int) -> tuple[list, int]:
        """Send again the batches whose time came (one unit's each); a 503 waits another second."""
        now, keep = time.monotonic(), []
        for due, batch in later:
            if due > now:
                keep.append((due, batch))
                continue
            reply = session.post(url, json={"endpoint": endpoint, "events": batch}, headers=headers, timeout=5)
            if reply.status_code == 503:
                keep.append((now + 1.0, batch))
            elif reply.status_code != 202:
                refused += len(batch)
        return keep, refused


def _by_status(statuses: dict[int, int]) -> str:
    return (": " + ", ".join(f"{n}× {code}" for code, n in sorted(statuses.items()))) if statuses else ""


class _Ranking:
    """A user asks to rank `k` rows of the reference click log; the top one is shown and
    clicked with its true probability (experiments/traffic.py)."""

    def __init__(self, users: int, seed: int, k: int):
        self.pool = data.generate(20_000, seed=seed + 101)
        self.truth = true_click_probability(self.pool)
        self.users, self.k = users, k

    def request(self, rng):
        rows = rng.integers(0, len(self.truth), self.k)
        dense = self.pool.dense[rows].ravel().tolist()
        sparse = self.pool.sparse[rows].ravel().tolist()
        body = {
            "inputs": [
                {"name": "dense", "shape": [self.k, data.N_DENSE], "datatype": "FP32", "data": dense},
                {"name": "sparse", "shape": [self.k, data.N_SPARSE], "datatype": "INT64", "data": sparse},
            ]
        }

        def clicked(reply: dict, rng) -> bool:
            scores = np.asarray(reply["outputs"][0]["data"], dtype=float)[: self.k]
            return show_and_click(scores, self.truth[rows], rng)[1]

        return f"user-{int(rng.zipf(1.5)) % self.users}", body, clicked


class _Recommending:
    """A user of a generative recommender sends its recent history and clicks when what it
    consumes next is among the `k` items recommended (experiments/traffic.GrUsers)."""

    def __init__(self, gr: str, items: int, users: int, seed: int, k: int):
        from experiments.gr import train as gr_recipe
        from experiments.gr.world import World, WorldConfig

        world = World(gr_recipe.TINY["world"] if gr == "tiny" else WorldConfig(items=items))
        self.users = GrUsers(world, users, seed=seed + 101)
        self.count, self.k = users, k

    def request(self, rng):
        number = int(rng.zipf(1.5)) % self.count
        user, history = f"user-{number}", self.users.history(number)
        body = {
            "inputs": [
                {"name": "user_id", "shape": [1], "datatype": "BYTES", "data": [user]},
                {"name": "history", "shape": [len(history)], "datatype": "INT64", "data": history},
                {"name": "top_k", "shape": [1], "datatype": "INT32", "data": [self.k]},
            ]
        }

        def clicked(reply: dict, rng) -> bool:
            items = next(output["data"] for output in reply["outputs"] if output["name"] == "items")
            return self.users.consume(number, [int(item) for item in items], rng)

        return user, body, clicked
