"""LLM surfaces: the gateway's OpenAI routes, and what a team registers for them (a backend's base
URL and secret, a provider secret's origins, an endpoint's timeouts, a key's token budgets).

Request bodies of `/v1/*` (oversized prompts) are bounded per endpoint with the tensor bodies;
their cases live with the transport's (surfaces of the gateway's HTTP and gRPC doors).
"""

from tests.adversarial.registry import Abuse, Surface

URLS = "tests/adversarial/test_llm_urls.py"
MEMORY = "tests/adversarial/test_llm_memory.py"
BUDGETS = "tests/adversarial/test_llm_budgets.py"
SSRF_TRITON = f"{URLS}::test_ssrf_to_another_teams_triton_unload_url"
PORT_SCAN = f"{URLS}::test_a_port_scan_learns_nothing_and_error_bodies_come_back_sanitized"
EXFILTRATION = f"{URLS}::test_a_deployer_cannot_have_the_provider_secret_sent_to_their_listener"
LOOP = f"{URLS}::test_a_backend_leading_back_to_the_gateway_is_refused_and_costs_one_hop"
LOOP_BURST = f"{URLS}::test_loops_do_not_hold_connections"
FLOOD = f"{MEMORY}::test_a_flooding_backend_costs_only_its_tenant"
HANG_UP = f"{BUDGETS}::test_hanging_up_before_usage_is_charged_the_real_tokens"
GENERATE = f"{BUDGETS}::test_generate_routes_serve_under_the_keys_budgets_and_rules_of_the_endpoint"
LOGPROBS = f"{BUDGETS}::test_logprobs_past_their_bounds_or_on_a_backend_that_cannot_are_refused_by_name"
N_CHOICES = f"{BUDGETS}::test_n_at_its_bound_is_reserved_and_charged_n_times_and_past_it_refused"

SURFACES = [
    Surface(
        name="OpenAI completions of LLM endpoints",
        routes=("POST /v1/chat/completions", "POST /v1/completions"),
        cases={
            Abuse.SSRF: (SSRF_TRITON, PORT_SCAN),
            Abuse.LOOP: (LOOP, LOOP_BURST),
            Abuse.OVERSIZED: (FLOOD, LOGPROBS, N_CHOICES),  # a reply larger than a request may hold; top_logprobs, n
            Abuse.MALFORMED: (LOGPROBS,),  # logprobs / top_logprobs of the wrong type, or on a backend that cannot
            Abuse.FLOOD: (FLOOD, HANG_UP, N_CHOICES),  # n generations for one request: reserved n times
            Abuse.HALF_OPEN: (HANG_UP,),  # a stream left before its usage
            Abuse.SECRET_EXFILTRATION: (EXFILTRATION,),
        },
        not_applicable={
            Abuse.FORGERY: "keys are checked as on the tensor path (no token of this surface's own)",
        },
    ),
    Surface(
        name="Triton's generate extension on LLM endpoints (generate, generate_stream)",
        routes=(
            "POST /v2/models/{endpoint}/generate",
            "POST /v2/models/{endpoint}/generate_stream",
            "POST /v2/models/{endpoint}/versions/{version}/generate",
            "POST /v2/models/{endpoint}/versions/{version}/generate_stream",
        ),
        cases={  # the completion path's own cases hold (one handler); these attack the door itself
            Abuse.FOREIGN_OBJECTS: (GENERATE,),  # another team's endpoint, a tensor endpoint, no key
            Abuse.MALFORMED: (GENERATE,),  # bad JSON, unknown fields, a field twice, a stream on generate
            Abuse.OVERSIZED: (GENERATE,),  # past the context, past the endpoint's body bound
            Abuse.FLOOD: (GENERATE,),  # a generate_stream flood stopped by the key's token budget
            Abuse.SSRF: (SSRF_TRITON, PORT_SCAN),  # the backends are the completion path's
            Abuse.LOOP: (LOOP,),
        },
        not_applicable={
            Abuse.FORGERY: "keys are checked as on the tensor path (no token of this surface's own)",
        },
    ),
    Surface(
        name="OpenAI model list and model (the openai client's models.list and models.retrieve)",
        routes=("GET /v1/models", "HEAD /v1/models", "GET /v1/models/{model}"),
        cases={  # another team's model names, with no key, a placeholder or another team's key
            Abuse.FOREIGN_OBJECTS: ("tests/gateway/test_llm_gateway.py::test_models_keys_and_no_name_oracle",),
        },
        not_applicable={
            Abuse.SSRF: "reads the route table only: no upstream call",
            Abuse.LOOP: "no upstream call",
            Abuse.OVERSIZED: "no body; the reply lists the models the key may call",
            Abuse.SECRET_EXFILTRATION: "names only, never a backend or secret",
        },
    ),
    Surface(
        name="LLM backend reference (base URL and secret)",
        routes=(
            "POST /api/v1/models/{model_name}/llm-versions/",
            "field llm_version.base_url",
            "field llm_version.secret",
        ),
        cases={
            Abuse.SSRF: (SSRF_TRITON, PORT_SCAN),
            Abuse.LOOP: (LOOP,),
            Abuse.SECRET_EXFILTRATION: (EXFILTRATION,),
        },
    ),
    Surface(
        name="Provider secrets and the origins they are bound to",
        routes=(
            "GET /api/v1/secrets/",
            "POST /api/v1/secrets/",
            "GET /api/v1/secrets/{pk}/",
            "DELETE /api/v1/secrets/{pk}/",
            "field secret.origins",
        ),
        cases={Abuse.SECRET_EXFILTRATION: (EXFILTRATION,)},
        not_applicable={
            Abuse.SSRF: "an origin passes the outbound guard like a base URL (tests/registry/test_llm_versions.py)",
        },
    ),
    Surface(
        name="LLM endpoint timeouts",
        routes=("field endpoint.first_token_timeout_ms", "field endpoint.timeout_ms"),
        cases={Abuse.LOOP: (LOOP,), Abuse.SLOW: (LOOP,)},  # the first-token ceiling ends a stalling backend
    ),
    Surface(
        name="Inference key token budgets",
        routes=("field inference_key.tokens_per_minute", "field inference_key.token_budgets"),
        cases={Abuse.FLOOD: (HANG_UP,)},  # and the 1,000-request race: tests/gateway/test_llm_budget_race.py
    ),
]
