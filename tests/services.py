"""Which real services answer here, as shell exports for `make test`.

With PostgreSQL and Redis reachable the suite uses them; without, it falls back to
SQLite and kombu's filesystem broker, and prints which service is missing (the tests
that need one then skip with "service:" in the reason; under CI=true they fail).
An explicitly set DATABASE_URL / CELERY_BROKER_URL always wins.
"""

import os
import shlex
import socket
import sys

POSTGRES = ("127.0.0.1", 5432, "postgres://postgres@127.0.0.1:5432/test")
REDIS = ("127.0.0.1", 6379, "redis://127.0.0.1:6379/0")


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def main() -> None:
    exports = {}
    notes = []
    if not os.environ.get("DATABASE_URL"):
        if answers(*POSTGRES[:2]):
            exports["DATABASE_URL"] = POSTGRES[2]
        else:
            notes.append("PostgreSQL not reachable: using SQLite; tests marked service:postgres will skip")
            exports["MODELPLANE_MISSING_SERVICES"] = "postgres"
    if not os.environ.get("CELERY_BROKER_URL"):
        if answers(*REDIS[:2]):
            exports["CELERY_BROKER_URL"] = REDIS[2]
        else:
            notes.append("Redis not reachable: using kombu's filesystem broker; tests marked service:redis will skip")
            exports["MODELPLANE_MISSING_SERVICES"] = ",".join(
                filter(None, [exports.get("MODELPLANE_MISSING_SERVICES"), "redis"])
            )
    db = exports.get("DATABASE_URL") or os.environ.get("DATABASE_URL") or "sqlite (var/)"
    broker = exports.get("CELERY_BROKER_URL") or os.environ.get("CELERY_BROKER_URL") or "filesystem://"
    print(f"make test: database={db.split('@')[-1]} broker={broker.split('@')[-1]}", file=sys.stderr)
    for note in notes:
        print(f"make test: {note}", file=sys.stderr)
    if "--exports" in sys.argv:
        for key, value in exports.items():
            print(f"export {key}={shlex.quote(value)}")


if __name__ == "__main__":
    main()
