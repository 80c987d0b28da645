"""When every replica of the stable variant is ejected, the gateway still tries a live
one (Envoy's panic threshold) instead of refusing all traffic; a replica that refused
the connection (nothing listening) is not tried."""

from gateway.table.routes import compile_table
from tests.gateway.tables import table


def test_panic_pick_tries_an_ejected_but_live_stable_replica():
    doc = table()
    doc["endpoints"][0]["variants"][0]["replicas"] = ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]
    stable = compile_table(doc, {}).endpoints["ctr"].stable
    a, b = (entry[0] for entry in stable.replicas)
    a.broken = b.broken = True  # e.g. three timeouts each while the machine was saturated
    a.outstanding, b.outstanding = 4, 1
    assert stable.pick() is None
    assert stable.pick_panic()[0] is b  # least loaded of the live ones
    b.refused = True  # b's port refused the connection: it is down
    assert stable.pick_panic()[0] is a
    a.refused = True
    assert stable.pick_panic() is None  # all down: 503 no_ready_backend, as before
