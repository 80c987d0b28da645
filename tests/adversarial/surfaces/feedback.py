"""Feedback's surfaces: its volume at both doors, the exposure tokens it cites, and the request
ids exposures are recorded under (docs/experiments.md says the rules).

The gateway's and the API's own surface modules list the same two routes for their
transport, malformed-body and auth cases; here are the cases about what feedback does to an
experiment and to the ingest every team shares: floods from one token, key or experiment,
replays, sybils, tokens of ended experiments and ids chosen to collide.
"""

from tests.adversarial.registry import Abuse, Surface

FLOOD = "tests/adversarial/test_feedback_flood.py"
SYBIL = "tests/adversarial/test_feedback_sybil.py"
DOOR = "tests/experiments/test_feedback_door.py"
STREAMS = "tests/experiments/test_feedback_streams.py"
HOSTILE = "tests/experiments/test_hostile_feedback.py"
TOKENS = "tests/gateway/test_exposure_tokens.py"
NO_URL = "it takes no URL: nothing is fetched on the tenant's behalf"

SURFACES = [
    Surface(
        name="feedback volume and exposure tokens at the gateway (POST /v2/feedback)",
        routes=("POST /v2/feedback",),
        cases={
            Abuse.FLOOD: (
                f"{FLOOD}::test_an_anonymous_flood_on_one_token_costs_only_its_source",
                f"{STREAMS}::test_a_flood_costs_its_own_stream_and_the_other_teams_click_goes_in_the_same_run",
            ),
            Abuse.OVERSIZED: (
                f"{DOOR}::test_one_token_carries_one_exposure_and_replays_are_refused_and_counted",
                f"{STREAMS}::test_an_entry_bigger_than_a_share_is_committed_in_parts_and_a_cut_off_run_stores_nothing_twice",
            ),
            Abuse.FORGERY: (
                f"{SYBIL}::test_400_fake_users_and_one_post_cannot_ship_the_worse_candidate",
                f"{DOOR}::test_a_token_of_an_ended_experiment_is_not_attributed",
                f"{TOKENS}::test_check_tokens",
            ),
            Abuse.COLLIDING_IDS: (f"{DOOR}::test_two_users_with_one_request_id_are_both_exposed",),
        },
        not_applicable={
            Abuse.SSRF: NO_URL,
            Abuse.LOOP: NO_URL,
            Abuse.SECRET_EXFILTRATION: "a token carries no secret (its HMAC key stays in the route table) and a refusal "
            "names only the caller's own events",
        },
    ),
    Surface(
        name="feedback volume and exposure tokens at the API (POST /api/v1/feedback/)",
        routes=("POST /api/v1/feedback/",),
        cases={
            Abuse.FORGERY: (
                f"{HOSTILE}::test_the_api_door_bounds_what_one_token_carries_like_the_gateways",
                f"{HOSTILE}::test_exposure_tokens_authenticate_only_where_accepted_and_cannot_be_forged",
            ),
            Abuse.FLOOD: (f"{HOSTILE}::test_feedback_rate_per_key_bounds_the_rows_a_flood_adds",),
            Abuse.COLLIDING_IDS: (f"{HOSTILE}::test_ids_are_scoped_per_team_and_duplicates_leak_nothing",),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.LOOP: NO_URL},
    ),
    Surface(
        name="exposure tokens (X-Exposure-Token on a reply, cited by feedback without a key)",
        routes=("field feedback.exposure_token",),
        cases={
            Abuse.FORGERY: (
                f"{TOKENS}::test_check_tokens",
                "tests/gateway/test_feedback_rules.py::test_exposure_tokens_verify_only_under_their_experiments_key_and_unchanged",
                f"{SYBIL}::test_400_fake_users_and_one_post_cannot_ship_the_worse_candidate",
            ),
            Abuse.FLOOD: (f"{FLOOD}::test_an_anonymous_flood_on_one_token_costs_only_its_source",),
            Abuse.OVERSIZED: (f"{TOKENS}::test_uses_sum_what_the_batch_asks_of_each_exposure",),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.LOOP: NO_URL},
    ),
    Surface(
        name="client request ids (X-Request-Id on inference over HTTP, gRPC metadata and the OpenAI API)",
        routes=("field infer.x_request_id",),
        cases={Abuse.COLLIDING_IDS: (f"{DOOR}::test_two_users_with_one_request_id_are_both_exposed",)},
        not_applicable={Abuse.SSRF: NO_URL, Abuse.LOOP: NO_URL},
    ),
]
