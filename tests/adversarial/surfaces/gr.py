"""Generative recommenders: the GR endpoint's KServe v2 inputs (user id, history, top_k,
beam_width) through the gateway to the Triton model, and the item catalog API (uploads of
item ids, semantic ids and embeddings)."""

from tests.adversarial.registry import Abuse, Surface

INPUTS = "tests/adversarial/test_gr_inputs.py"
AFFINITY = "tests/adversarial/test_gr_affinity.py"
API = "tests/gr/test_catalog_api.py"

SURFACES = [
    Surface(
        name="gr-endpoint-inputs",
        # The gateway's infer route (listed for every tensor endpoint by the gateway's surfaces);
        # here for what a generative recommender's inputs add to it.
        routes=("POST /v2/models/{endpoint}/infer",),
        cases={
            Abuse.OVERSIZED: (
                f"{INPUTS}::test_absurd_values_are_a_clear_400_and_the_neighbour_holds",
                f"{INPUTS}::test_a_history_over_the_body_limit_is_refused_at_the_door",
            ),
            Abuse.MALFORMED: (f"{INPUTS}::test_absurd_values_are_a_clear_400_and_the_neighbour_holds",),
            Abuse.COLLIDING_IDS: (f"{INPUTS}::test_absurd_values_are_a_clear_400_and_the_neighbour_holds",),
            Abuse.FLOOD: (f"{INPUTS}::test_a_flood_of_new_users_stays_inside_the_cache_bound",),
        },
        not_applicable={
            Abuse.SSRF: "no URL is taken",
            Abuse.LOOP: "no target is taken",
            Abuse.SECRET_EXFILTRATION: "the model holds no secret; replies carry only catalog item ids and scores",
            Abuse.SLOW: "the gateway's receive timeouts apply as to any endpoint (tests/gateway/test_hostile.py)",
            Abuse.HALF_OPEN: "the gateway's idle timeouts apply as to any endpoint (tests/gateway/test_hostile.py)",
            Abuse.FOREIGN_OBJECTS: "a user id names a cache entry inside the endpoint's own model; ids are not shared across endpoints",
            Abuse.FORGERY: "the endpoint's keys are the gateway's (tests/gateway/test_tenants.py)",
        },
    ),
    Surface(
        name="gr-affinity-key",
        # The route entry's `affinity: user` makes the request's user id (the user_id input, else
        # X-User-Id) choose the replica (gateway/table/affinity.py): a value a client sets that moves load.
        routes=("field endpoint.affinity", "POST /v2/models/{endpoint}/infer"),
        cases={
            Abuse.OVERSIZED: (f"{AFFINITY}::test_absurd_user_keys_are_a_clear_400_or_routed_without_affinity",),
            Abuse.MALFORMED: (f"{AFFINITY}::test_absurd_user_keys_are_a_clear_400_or_routed_without_affinity",),
            Abuse.FLOOD: (f"{AFFINITY}::test_one_user_id_cannot_pin_a_replica_nor_move_another_tenants_users",),
            Abuse.COLLIDING_IDS: (f"{AFFINITY}::test_one_user_id_cannot_pin_a_replica_nor_move_another_tenants_users",),
            Abuse.FOREIGN_OBJECTS: (
                f"{AFFINITY}::test_one_user_id_cannot_pin_a_replica_nor_move_another_tenants_users",
            ),
        },
        not_applicable={
            Abuse.SSRF: "the key chooses among the route table's replicas only; no address is taken",
            Abuse.LOOP: "no target is taken",
            Abuse.SECRET_EXFILTRATION: "placement needs no secret (BLAKE2b of endpoint and key); replies name no replica",
            Abuse.SLOW: "the gateway's receive timeouts apply as to any endpoint (tests/gateway/test_hostile.py)",
            Abuse.HALF_OPEN: "the gateway's idle timeouts apply as to any endpoint (tests/gateway/test_hostile.py)",
            Abuse.FORGERY: "a user id is the client's own claim about its request; it buys only a replica, bounded in load",
        },
    ),
    Surface(
        name="item-catalogs",
        routes=(
            "GET /api/v1/item-catalogs/",
            "POST /api/v1/item-catalogs/",
            "GET /api/v1/item-catalogs/{name}/",
            "GET /api/v1/item-catalogs/{catalog_name}/versions/",
            "POST /api/v1/item-catalogs/{catalog_name}/versions/",
            "GET /api/v1/item-catalogs/{catalog_name}/versions/{version}/",
        ),
        cases={
            Abuse.MALFORMED: (
                f"{API}::test_a_pickle_or_an_object_array_is_refused_unread",
                f"{API}::test_a_version_that_cannot_be_a_catalog_is_a_400_naming_why",
            ),
            Abuse.COLLIDING_IDS: (f"{API}::test_a_version_that_cannot_be_a_catalog_is_a_400_naming_why",),
            Abuse.FOREIGN_OBJECTS: (f"{API}::test_another_teams_catalog_is_a_404_and_its_name_is_not_told",),
        },
        not_applicable={
            Abuse.SSRF: "no URL is taken",
            Abuse.LOOP: "no target is taken",
            Abuse.SECRET_EXFILTRATION: "catalogs hold item ids and codes only",
            Abuse.OVERSIZED: "uploads pass the API's MAX_UPLOAD_MB (413 before reading) and GR_CATALOG_MAX_MB / "
            "GR_CATALOG_MAX_ITEMS; the same door as version uploads (tests/registry/test_api.py)",
            Abuse.SLOW: "the web server's request timeouts, as every API route",
            Abuse.HALF_OPEN: "the web server's request timeouts, as every API route",
            Abuse.FLOOD: "the API's per-user throttles, as every API route",
            Abuse.FORGERY: "token auth, as every API route",
        },
    ),
]
