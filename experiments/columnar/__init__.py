"""The columnar exposure and feedback store: ClickHouse's engine, embedded (chdb) or a server.

One schema and one set of SQL statements (schema.py) run on either connection
(connection.py): chdb, ClickHouse's engine inside this process, is the embedded default
(`EXPERIMENT_STORE=chdb`, data under VAR_DIR/experiment-store); a ClickHouse server through
clickhouse-connect at scale (`EXPERIMENT_STORE=clickhouse://host:8123/db`). store.py is the
`ExposureStore` over either; stats.py computes every running experiment's per-arm
sufficient statistics in one query per analysis tick.

Who owns the embedded store: chdb keeps its data directory open in one process, so exactly
one process writes and reads it, the experiment-data process (`manage.py run_experiment_data`,
a child of `make run`): it ingests the log, runs the analysis tick and builds datasets. The
web process never opens it: analysis results (evidence, with each arm's sufficient statistics)
stay in the relational database, and a dataset build asked at the API is a row the owner
builds. A ClickHouse server has no such owner: any process may read and write it.
"""
