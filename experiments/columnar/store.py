"""`ClickHouseStore`: the ExposureStore over ClickHouse's engine (chdb or a server).

Writes: exposures and captures are appended (replays collapse, schema.py); a feedback batch
is judged the way the PostgreSQL store judges it (experiments/attribution.py says the rule)
with the lookups in SQL and the verdicts vectorised in pandas:

1. the team's event ids already stored, and the batch's own repeats, are duplicates;
2. an event by request id matches that exposure in the endpoint's experiments (a token's
   event only in its own experiment); an event by unit matches the unit's latest exposure at
   or before it (ASOF JOIN) in a running experiment;
3. no match, or dated before its exposure: `unknown`; a token of an ended experiment:
   `refused`; past the attribution window: `late`; else `attributed`;
4. a token's events past what one exposure carries (what the store holds plus this batch's
   running count) are `refused`.

One writer at a time (schema.py says why that makes the insert-time dedupe exact): the
store's lock in this process, the ingest's lock across processes.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

import numpy as np
import pandas as pd

from experiments import feedback as feedback_rules
from experiments.columnar import schema, stats
from experiments.models import ExperimentState, FeedbackStatus
from experiments.store import ExposureStore, FeedbackResult

SKEW_S = feedback_rules.limits()["before_exposure_skew_s"]
COUNTED = ("attributed", "late")


def _epoch(t) -> float:
    return t.timestamp() if isinstance(t, datetime) else float(t)


class ClickHouseStore(ExposureStore):
    def __init__(self, conn, db: str):
        self.conn, self.db = conn, db
        self.lock = threading.Lock()
        schema.create(conn, db)

    # --- writes ------------------------------------------------------------------------
    def write_exposures(self, rows: list[dict]) -> int:
        """rows: request_id, experiment (id), arm (id), unit_key, time, score, team (optional)."""
        if not rows:
            return 0
        frame = pd.DataFrame(
            {
                "team": np.array([r.get("team") or 0 for r in rows], dtype=np.uint32),
                "experiment": np.array([r["experiment"] for r in rows], dtype=np.uint32),
                "arm": np.array([r["arm"] for r in rows], dtype=np.uint32),
                "unit": [r["unit_key"] for r in rows],
                "request_id": [r["request_id"] for r in rows],
                "t": np.array([_epoch(r["time"]) for r in rows], dtype=np.float64),
                "score": np.array([np.nan if r.get("score") is None else r["score"] for r in rows], dtype=np.float64),
            }
        )
        with self.lock:
            self.conn.load("x_in", frame)
            self.conn.command(
                f"INSERT INTO {self.db}.exposures SELECT team, experiment, arm, unit, request_id, "
                "toDateTime64(t, 6, 'UTC'), if(isNaN(score), NULL, score) FROM x_in"
            )
        return len(frame)

    def write_captures(self, rows: list[dict]) -> int:
        """rows: team, endpoint, experiment, variant, propensity, request_id, unit, time, signature, inputs (JSON)."""
        if not rows:
            return 0
        frame = pd.DataFrame(
            {
                "team": np.array([r["team"] for r in rows], dtype=np.uint32),
                "endpoint": [r["endpoint"] for r in rows],
                "experiment": np.array([r.get("experiment") or 0 for r in rows], dtype=np.uint32),
                "variant": [r["variant"] for r in rows],
                "propensity": np.array([r["propensity"] for r in rows], dtype=np.float64),
                "request_id": [r["request_id"] for r in rows],
                "unit": [r.get("unit") or "" for r in rows],
                "t": np.array([_epoch(r["time"]) for r in rows], dtype=np.float64),
                "signature": [r["signature"] for r in rows],
                "inputs": [r["inputs"] for r in rows],
            }
        )
        with self.lock:
            self.conn.load("c_in", frame)
            self.conn.command(
                f"INSERT INTO {self.db}.captures SELECT team, endpoint, experiment, variant, propensity, request_id, "
                "unit, toDateTime64(t, 6, 'UTC'), signature, inputs FROM c_in"
            )
        return len(frame)

    def write_feedback(self, *, team, endpoint_name: str, experiments, events: list[dict]) -> FeedbackResult:
        result = FeedbackResult(received=len(events))
        if not events:
            return result
        with self.lock:
            judged = self._judge(team.pk, experiments, events)
            self._insert_feedback(team.pk, endpoint_name, judged)
        counts = judged["status"].value_counts().to_dict() if len(judged) else {}
        for status in FeedbackStatus:
            setattr(result, status.value, int(counts.get(status.value, 0)))
        result.duplicates = result.received - len(judged)
        return result

    def _batch(self, events: list[dict]) -> pd.DataFrame:
        frame = pd.DataFrame(
            {
                "ord": np.arange(len(events), dtype=np.int64),
                "event_id": [e["event_id"] for e in events],
                "kind": [e["type"] for e in events],
                "value": np.array([e.get("value", 1.0) for e in events], dtype=np.float64),
                "request_id": [e.get("request_id", "") for e in events],
                "unit_key": [e.get("unit_key", "") for e in events],
                "t": np.array([_epoch(e["time"]) for e in events], dtype=np.float64),
                "tok_exp": np.array([e.get("token_experiment") or 0 for e in events], dtype=np.int64),
                "refused": np.array([bool(e.get("refused")) for e in events], dtype=bool),
            }
        )
        return frame.drop_duplicates("event_id", keep="first")

    def _judge(self, team_id: int, experiments, events: list[dict]) -> pd.DataFrame:
        frame = self._batch(events)
        self.conn.load(
            "f_in", frame[["event_id", "request_id", "unit_key"]].assign(t_hi=frame["t"].to_numpy() + SKEW_S)
        )
        known = self.conn.frame(
            f"SELECT DISTINCT event_id FROM {self.db}.feedback WHERE team = {{team:UInt32}} "
            "AND event_id IN (SELECT event_id FROM f_in)",
            {"team": team_id},
        )
        frame = frame[~frame["event_id"].isin(set(known["event_id"]))].reset_index(drop=True)
        exp_ids = [x.pk for x in experiments]
        unit_exp_ids = [x.pk for x in experiments if x.state == ExperimentState.RUNNING] or exp_ids
        frame = self._match(frame, exp_ids, unit_exp_ids)
        window = pd.Series({x.pk: float(x.attribution_window_s) for x in experiments}, dtype=np.float64)
        status = np.full(len(frame), "attributed", dtype=object)
        known_exp = frame["x_exp"].to_numpy() > 0
        dt = frame["t"].to_numpy() - frame["x_t"].to_numpy()
        status[frame["x_exp"].map(window).fillna(np.inf).to_numpy() < dt] = "late"
        status[frame["refused"].to_numpy() & known_exp] = "refused"
        status[~known_exp | (dt < -SKEW_S)] = "unknown"
        frame["status"] = status
        return self._cap_tokens(frame)

    def _match(self, frame: pd.DataFrame, exp_ids: list[int], unit_exp_ids: list[int]) -> pd.DataFrame:
        by_request = self.conn.frame(
            f"SELECT experiment AS x_exp, request_id, any(arm) AS x_arm, any(unit) AS x_unit, "
            f"toFloat64(min(time)) AS x_t FROM {self.db}.exposures "
            "WHERE experiment IN {exps:Array(UInt32)} AND request_id IN (SELECT request_id FROM f_in WHERE request_id != '') "
            "GROUP BY experiment, request_id",
            {"exps": exp_ids},
        )
        by_unit = self.conn.frame(
            "SELECT f.event_id AS event_id, x.experiment AS x_exp, x.arm AS x_arm, x.unit AS x_unit, x.t AS x_t "
            "FROM f_in AS f ASOF INNER JOIN ("
            # exposures of one unit at one instant: the greatest request id's (as PostgreSQL's ORDER BY)
            "  SELECT tupleElement(pick, 1) AS experiment, tupleElement(pick, 2) AS arm, unit, t FROM ("
            "   SELECT argMax((experiment, arm), request_id) AS pick, unit, toFloat64(time) AS t"
            f"  FROM {self.db}.exposures"
            "   WHERE experiment IN {exps:Array(UInt32)} AND unit IN (SELECT unit_key FROM f_in WHERE request_id = '')"
            "   GROUP BY unit, time)"
            ") AS x ON f.unit_key = x.unit AND f.t_hi >= x.t WHERE f.request_id = ''",
            {"exps": unit_exp_ids},
        )
        by_request["x_exp"] = by_request["x_exp"].astype(np.int64)
        req = frame[frame["request_id"] != ""].merge(by_request, on="request_id", how="left")
        mine = (req["tok_exp"] == 0) | (req["tok_exp"] == req["x_exp"])  # a token's event: its own experiment only
        req.loc[~mine, ["x_exp", "x_arm", "x_unit", "x_t"]] = np.nan
        req = req.sort_values(["ord", "x_exp"], na_position="last").drop_duplicates("ord", keep="first")
        unit = frame[frame["request_id"] == ""].merge(by_unit, on="event_id", how="left")
        out = pd.concat([req, unit], ignore_index=True).sort_values("ord").reset_index(drop=True)
        out["x_exp"] = out["x_exp"].fillna(0).astype(np.int64)
        out["x_arm"] = out["x_arm"].fillna(0).astype(np.int64)
        out["x_unit"] = out["x_unit"].fillna("").astype(str)
        out["x_t"] = out["x_t"].astype(np.float64).fillna(0.0)
        return out

    def _cap_tokens(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Token events past one exposure's allowance (stored + this batch, in order): refused."""
        tok = (frame["tok_exp"] > 0) & frame["status"].isin(COUNTED)
        if not tok.any():
            return frame
        sub = frame[tok]
        self.conn.load("t_in", sub[["request_id"]].drop_duplicates())
        prior = self.conn.frame(
            f"SELECT experiment AS x_exp, request_id, kind, count() AS p_n, sum(abs(value)) AS p_a "
            f"FROM {self.db}.feedback WHERE via_token = 1 AND experiment IN {{exps:Array(UInt32)}} "
            "AND request_id IN (SELECT request_id FROM t_in) AND status IN ('attributed', 'late') "
            "GROUP BY experiment, request_id, kind",
            {"exps": sorted({int(x) for x in sub["x_exp"]})},
        )
        prior["x_exp"] = prior["x_exp"].astype(np.int64)
        keys = ["x_exp", "request_id", "kind"]
        sub = sub.merge(prior, on=keys, how="left")
        sub[["p_n", "p_a"]] = sub[["p_n", "p_a"]].fillna(0)
        nth = sub.groupby(keys).cumcount() + 1
        carried = sub["value"].abs().groupby([sub[k] for k in keys]).cumsum()
        allowed = feedback_rules.per_exposure()
        cap = sub["kind"].map({k: allowed[k] for k in ("click", "conversion", "value")})
        over = (sub["p_n"] + nth > cap) | ((sub["kind"] == "value") & (sub["p_a"] + carried > allowed["value_abs"]))
        frame.loc[sub.loc[over.to_numpy(), "ord"].map(dict(zip(frame["ord"], frame.index))), "status"] = "refused"
        return frame

    def _insert_feedback(self, team_id: int, endpoint_name: str, judged: pd.DataFrame) -> None:
        if not len(judged):
            return
        counted = judged["status"].isin(COUNTED)
        unknown = judged["status"] == "unknown"
        out = pd.DataFrame(
            {
                "event_id": judged["event_id"],
                "kind": judged["kind"],
                "value": judged["value"],
                "request_id": judged["request_id"],
                "unit_key": judged["unit_key"],
                "t": judged["t"],
                "status": judged["status"].astype(str),
                "experiment": np.where(unknown, 0, judged["x_exp"]).astype(np.uint32),
                "arm": np.where(counted, judged["x_arm"], 0).astype(np.uint32),
                "exposure_unit": np.where(counted, judged["x_unit"], ""),
                "via_token": (judged["tok_exp"] > 0).astype(np.uint8),
            }
        )
        self.conn.load("j_in", out)
        self.conn.command(
            f"INSERT INTO {self.db}.feedback SELECT {{team:UInt32}}, {{endpoint:String}}, event_id, kind, value, "
            "request_id, unit_key, toDateTime64(t, 6, 'UTC'), toDateTime64({now:Float64}, 6, 'UTC'), status, "
            "experiment, arm, exposure_unit, via_token FROM j_in",
            {"team": team_id, "endpoint": endpoint_name, "now": time.time()},
        )

    # --- reads -------------------------------------------------------------------------
    def arm_sums(self, experiment):
        return self.arm_sums_many([experiment])[experiment.pk]

    def arm_sums_many(self, experiments) -> dict:
        """{experiment pk: (sums, extras, counts)} for every experiment given, in one
        statistics query plus one of feedback counts (stats.py)."""
        return stats.arm_sums_many(self.conn, self.db, list(experiments))

    # --- reads for datasets and tests --------------------------------------------------
    def frame(self, sql: str, params: dict | None = None) -> pd.DataFrame:
        return self.conn.frame(sql.replace("{db}", self.db), params)

    def drop(self) -> None:
        """Drop this store's database (tests' and benchmarks' own)."""
        self.conn.command(f"DROP DATABASE IF EXISTS {self.db}")
