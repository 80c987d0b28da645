"""Two connections with one surface: chdb in this process, or a ClickHouse server.

`command(sql, params)` runs a statement, `frame(sql, params)` returns a pandas DataFrame,
`load(name, frame)` makes a temporary table of a DataFrame for the statements that follow
(the batch a statement joins against). Parameters use ClickHouse's own binding
(`{name:Type}`), so the SQL text is identical on both.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd

_CHDB: dict[str, object] = {}  # one chdb session per process (chdb allows one): path -> session
_CHDB_LOCK = threading.Lock()


def chdb_open_here() -> bool:
    """Whether this process holds the embedded store's session (it owns the store)."""
    return bool(_CHDB)


class ChdbConnection:
    """ClickHouse's engine in this process over a data directory only this process opens."""

    def __init__(self, path: Path):
        from chdb import session

        self.path = str(path)
        with _CHDB_LOCK:
            if self.path not in _CHDB:
                if _CHDB:
                    raise RuntimeError(
                        f"this process already opened the embedded store at {next(iter(_CHDB))}; chdb allows one"
                    )
                Path(self.path).mkdir(parents=True, exist_ok=True)
                _CHDB[self.path] = session.Session(self.path)
        self.session = _CHDB[self.path]
        self.lock = threading.RLock()  # one statement at a time on the one session

    def command(self, sql: str, params: dict | None = None) -> None:
        with self.lock:
            self.session.query(sql, "Null", params=params or {})

    def frame(self, sql: str, params: dict | None = None) -> pd.DataFrame:
        with self.lock:
            return self.session.query(sql, "DataFrame", params=params or {})

    def load(self, name: str, frame: pd.DataFrame) -> None:
        with self.lock:
            self.session.query(f"DROP TEMPORARY TABLE IF EXISTS {name}", "Null")
            self.session.query(f"CREATE TEMPORARY TABLE {name} ENGINE = Memory AS SELECT * FROM Python(frame)", "Null")


class ServerConnection:
    """A ClickHouse server through clickhouse-connect (HTTP), in a session of its own so
    temporary tables live from `load` to the statements that read them."""

    def __init__(self, url: str):
        import uuid

        import clickhouse_connect

        self.client = clickhouse_connect.get_client(dsn=url, session_id=f"modelplane-{uuid.uuid4().hex}")
        self.lock = threading.RLock()

    def command(self, sql: str, params: dict | None = None) -> None:
        with self.lock:
            self.client.command(sql, parameters=params or None)

    def frame(self, sql: str, params: dict | None = None) -> pd.DataFrame:
        with self.lock:
            return self.client.query_df(sql, parameters=params or None)

    def load(self, name: str, frame: pd.DataFrame) -> None:
        types = {"int64": "Int64", "uint32": "UInt32", "float64": "Float64", "uint8": "UInt8", "object": "String"}
        columns = ", ".join(f"{c} {types.get(str(t), 'String')}" for c, t in frame.dtypes.items())
        with self.lock:
            self.client.command(f"DROP TEMPORARY TABLE IF EXISTS {name}")
            self.client.command(f"CREATE TEMPORARY TABLE {name} ({columns}) ENGINE = Memory")
            if len(frame):
                self.client.insert_df(name, frame)
