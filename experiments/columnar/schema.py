"""The tables of the columnar store, the same DDL on chdb and on a ClickHouse server.

Exposures and feedback are MergeTree tables partitioned by day and ordered by experiment
and unit, so one experiment's rows are contiguous and a day's partition is dropped whole by
retention. Dedupe:

- feedback: at insert time, by (team, event_id). The store has one writer at a time (the
  experiment-data process for chdb; one ingest per store at scale, ingest.LOCK), so a read of
  the team's known ids before the insert is exact, and the door's reply needs the duplicate
  count at once. A bloom filter on event_id keeps that read to the granules that may hold the ids.
- exposures: ReplacingMergeTree on (experiment, unit, request_id): an exposure is replayed only
  when the ingest died between its insert and the log's acknowledgement, with the same key;
  merges collapse it and every read counts distinct request ids (uniqExact), so it is counted
  once before the merge too.
- captures (request inputs logged with their exposure, for training data): ReplacingMergeTree
  on (endpoint, time, request_id), read by request id when a dataset is built.
"""

from __future__ import annotations

TABLES = {
    "exposures": """
CREATE TABLE IF NOT EXISTS {db}.exposures (
    team UInt32,
    experiment UInt32,
    arm UInt32,
    unit String,
    request_id String,
    time DateTime64(6, 'UTC'),
    score Nullable(Float64)
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(time)
ORDER BY (experiment, unit, request_id)
""",
    "feedback": """
CREATE TABLE IF NOT EXISTS {db}.feedback (
    team UInt32,
    endpoint LowCardinality(String),
    event_id String,
    kind LowCardinality(String),
    value Float64,
    request_id String,
    unit_key String,
    time DateTime64(6, 'UTC'),
    received DateTime64(6, 'UTC'),
    status LowCardinality(String),
    experiment UInt32,
    arm UInt32,
    exposure_unit String,
    via_token UInt8,
    INDEX event_idx event_id TYPE bloom_filter GRANULARITY 1,
    INDEX request_idx request_id TYPE bloom_filter GRANULARITY 1
) ENGINE = MergeTree
PARTITION BY toDate(time)
ORDER BY (experiment, exposure_unit, team, event_id)
""",
    "captures": """
CREATE TABLE IF NOT EXISTS {db}.captures (
    team UInt32,
    endpoint LowCardinality(String),
    experiment UInt32,
    variant LowCardinality(String),
    propensity Float64,
    request_id String,
    unit String,
    time DateTime64(6, 'UTC'),
    signature String,
    inputs String
) ENGINE = ReplacingMergeTree
PARTITION BY toDate(time)
ORDER BY (endpoint, time, request_id)
""",
}

# the exposures table also answers lookups by request id (feedback citing one)
EXPOSURE_REQUEST_INDEX = (
    "ALTER TABLE {db}.exposures ADD INDEX IF NOT EXISTS request_idx request_id TYPE bloom_filter GRANULARITY 1"
)


def create(conn, db: str) -> None:
    conn.command(f"CREATE DATABASE IF NOT EXISTS {db}")
    for ddl in TABLES.values():
        conn.command(ddl.format(db=db))
    conn.command(EXPOSURE_REQUEST_INDEX.format(db=db))
