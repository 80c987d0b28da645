"""The gateway's tenant-facing surfaces: every HTTP route its dispatch serves
(gateway.process.server.http_routes) and every gRPC method of the KServe v2 service, with the tests
that attack each."""

from gateway.process.control import PATHS as CONTROL_PATHS
from tests.adversarial.registry import Abuse, Surface

HOSTILE = "tests/gateway/test_hostile.py"
HTTP_ABUSE = "tests/adversarial/test_gateway_http_abuse.py"
GRPC_ABUSE = "tests/adversarial/test_gateway_grpc_abuse.py"
ORACLE = "tests/gateway/test_no_name_oracle.py"
CLIENTS = "tests/gateway/test_clients.py"
LLM = "tests/gateway/test_llm_gateway.py"
CONTROL = "tests/adversarial/test_control_port.py"

NO_URL = "the client names an endpoint, never an address: replicas come from the route table the control plane wrote"
NO_SECRET = "the request carries its own key only; replies name the endpoint, never a replica, key or secret"

GRPC_METHODS = tuple(
    f"grpc /inference.GRPCInferenceService/{name}"
    for name in (
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelInfer",
        "ModelStreamInfer",
        "ModelConfig",
        "ModelStatistics",
        "RepositoryIndex",
        "RepositoryModelLoad",
        "RepositoryModelUnload",
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
        "TraceSetting",
        "LogSettings",
    )
)

SURFACES = [
    Surface(
        name="tensor inference over HTTP (KServe v2 / Triton JSON and binary)",
        routes=("POST /v2/models/{endpoint}/infer", "POST /v2/models/{endpoint}/versions/{version}/infer"),
        cases={
            Abuse.OVERSIZED: (
                f"{HTTP_ABUSE}::test_big_bodies_are_refused_before_they_are_read",
                f"{HOSTILE}::test_C2_huge_declared_shape_is_a_400_and_triton_stays_up",
                "tests/gateway/test_bodybounds.py::test_bounds",
            ),
            Abuse.SLOW: (
                f"{HTTP_ABUSE}::test_slowloris_ends_at_the_receive_timeout",
                f"{HOSTILE}::test_a_client_that_never_reads_its_replies_costs_only_itself",
            ),
            Abuse.HALF_OPEN: (f"{HTTP_ABUSE}::test_slowloris_ends_at_the_receive_timeout",),
            Abuse.FLOOD: (
                f"{HTTP_ABUSE}::test_connection_hoarding_takes_only_the_hoarders_share",
                f"{HTTP_ABUSE}::test_near_the_cap_the_oldest_idle_connections_make_room",
                f"{HOSTILE}::test_many_tiny_chunks_do_not_block_the_loop",
                f"{HOSTILE}::test_tenant_keys_statuses_and_metrics",
            ),
            Abuse.MALFORMED: (
                f"{HOSTILE}::test_hostile_request",
                f"{HOSTILE}::test_fuzzed_requests_never_crash_hang_or_grow_the_gateway",
                "tests/gateway/test_tensor_contents_live.py::test_malformed_contents_are_a_400_that_never_reaches_triton",
            ),
            Abuse.FORGERY: (
                f"{HOSTILE}::test_abuse_aimed_at_the_canary_is_the_clients_fault_and_reaches_neither_judge_nor_breaker",
            ),
            Abuse.FOREIGN_OBJECTS: (f"{ORACLE}::test_http_a_closed_endpoint_refused_reads_as_an_unknown_one",),
        },
        not_applicable={
            Abuse.SSRF: NO_URL,
            Abuse.LOOP: NO_URL,
            Abuse.SECRET_EXFILTRATION: NO_SECRET,
            Abuse.COLLIDING_IDS: "request ids are the gateway's own unless the client's is printable, and only echoed",
        },
    ),
    Surface(
        name="Triton HTTP reads (server and model metadata, ready, config, statistics)",
        routes=(
            "GET /v2/models/stats",
            "GET /v2/models/{endpoint}",
            "GET /v2/models/{endpoint}/ready",
            "GET /v2/models/{endpoint}/config",
            "GET /v2/models/{endpoint}/stats",
            "GET /v2/models/{endpoint}/versions/{version}",
            "GET /v2/models/{endpoint}/versions/{version}/ready",
            "GET /v2/models/{endpoint}/versions/{version}/config",
            "GET /v2/models/{endpoint}/versions/{version}/stats",
            "GET /v2",
        ),
        cases={
            Abuse.FOREIGN_OBJECTS: (
                f"{ORACLE}::test_http_a_closed_endpoint_refused_reads_as_an_unknown_one",
                f"{ORACLE}::test_time_does_not_tell_a_closed_endpoint_from_an_unknown_one",
            ),
            Abuse.MALFORMED: (f"{HOSTILE}::test_hostile_request",),
            Abuse.OVERSIZED: ("tests/gateway/test_bodybounds.py::test_bounds",),
            Abuse.FLOOD: (f"{HTTP_ABUSE}::test_connection_hoarding_takes_only_the_hoarders_share",),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.LOOP: NO_URL, Abuse.SECRET_EXFILTRATION: NO_SECRET},
    ),
    Surface(
        name="KServe v2 over gRPC",
        routes=GRPC_METHODS,
        cases={
            Abuse.HALF_OPEN: (
                f"{GRPC_ABUSE}::test_half_open_streams_cost_only_their_connection",
                f"{GRPC_ABUSE}::test_held_half_open_streams_cost_the_tenant_nothing",
                f"{GRPC_ABUSE}::test_streams_held_open_are_bounded_per_client_and_end",  # ModelStreamInfer
                f"{CLIENTS}::test_grpc_unserved_methods_and_malformed_messages_answer_cleanly",  # unserved: at HEADERS
            ),
            Abuse.FLOOD: (
                f"{GRPC_ABUSE}::test_idle_connections_past_the_cap_are_closed",
                f"{GRPC_ABUSE}::test_ping_flood_gets_goaway",
                f"{GRPC_ABUSE}::test_streams_held_open_are_bounded_per_client_and_end",
                f"{CLIENTS}::test_grpc_rate_limit_and_concurrency_quota",
                f"{CLIENTS}::test_grpc_rpcs_in_progress_are_bounded",
            ),
            Abuse.OVERSIZED: (f"{CLIENTS}::test_grpc_limits_deadline_and_unknowns",),
            Abuse.MALFORMED: (
                f"{CLIENTS}::test_grpc_bad_tensors_are_invalid_argument_before_triton",
                f"{CLIENTS}::test_grpc_unserved_methods_and_malformed_messages_answer_cleanly",  # streams too
                "tests/gateway/test_grpc_contents.py",
            ),
            Abuse.FOREIGN_OBJECTS: (
                f"{ORACLE}::test_grpc_a_closed_endpoint_refused_reads_as_an_unknown_one",
                f"{ORACLE}::test_grpc_model_ready_is_false_alike",
                f"{CLIENTS}::test_grpc_keys",
                f"{CLIENTS}::test_grpc_streams_serve_like_unary_infer_with_keys_and_splits",
            ),
        },
        not_applicable={
            Abuse.SSRF: NO_URL + "; the repository, shared-memory, trace and log RPCs answer UNIMPLEMENTED",
            Abuse.LOOP: NO_URL,
            Abuse.SECRET_EXFILTRATION: NO_SECRET,
        },
    ),
    Surface(
        name="gRPC health and server reflection",
        routes=(
            "grpc /grpc.health.v1.Health/Check",
            "grpc /grpc.health.v1.Health/Watch",
            "grpc /grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        ),
        cases={
            Abuse.HALF_OPEN: (f"{GRPC_ABUSE}::test_streams_held_open_are_bounded_per_client_and_end",),  # Watch
            Abuse.FLOOD: (
                f"{GRPC_ABUSE}::test_streams_held_open_are_bounded_per_client_and_end",
                f"{CLIENTS}::test_grpc_rpcs_in_progress_are_bounded",
            ),
            Abuse.MALFORMED: (f"{CLIENTS}::test_grpc_unserved_methods_and_malformed_messages_answer_cleanly",),
            Abuse.FOREIGN_OBJECTS: (f"{CLIENTS}::test_grpc_aio_stream_and_health_and_reflection",),  # no endpoint named
        },
        not_applicable={
            Abuse.SSRF: NO_URL,
            Abuse.LOOP: NO_URL,
            Abuse.SECRET_EXFILTRATION: "the server's status and the public Triton protos only; no key, endpoint or replica",
            Abuse.OVERSIZED: "a service name bounded by grpc.max_receive_message_length; nothing is stored",
        },
    ),
    Surface(
        name="feedback at the gateway (POST /v2/feedback)",
        routes=("POST /v2/feedback",),
        cases={
            Abuse.FORGERY: (
                f"{ORACLE}::test_http_feedback_to_a_closed_endpoint_reads_as_an_unknown_one",
                "tests/gateway/test_feedback_rules.py::test_exposure_tokens_verify_only_under_their_experiments_key_and_unchanged",
            ),
            Abuse.MALFORMED: (
                "tests/gateway/test_feedback_rules.py::test_both_doors_refuse_the_same_bodies_with_the_same_words",
            ),
            Abuse.FLOOD: ("tests/gateway/test_feedback_rules.py::test_event_buckets_bound_events_per_second_per_key",),
            Abuse.OVERSIZED: ("tests/gateway/test_bodybounds.py::test_bounds",),
            Abuse.COLLIDING_IDS: (
                "tests/experiments/test_hostile_feedback.py::test_ids_are_scoped_per_team_and_duplicates_leak_nothing",
            ),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.LOOP: NO_URL},
    ),
    Surface(
        name="operator surfaces and health (/metrics, /status, health)",
        routes=(
            "GET /metrics",
            "GET /status",
            "GET /v2/health/live",
            "GET /v2/health/ready",
            "GET /healthz",
            "GET /health",
        ),
        cases={
            Abuse.SECRET_EXFILTRATION: (
                f"{HOSTILE}::test_health_says_live_and_ready_only_and_operator_surfaces_need_the_token",
                "tests/gateway/test_settings_metrics_token.py::test_a_gateway_without_a_metrics_token_refuses_to_start",
            ),
            Abuse.OVERSIZED: ("tests/gateway/test_bodybounds.py::test_bounds",),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.LOOP: NO_URL},
    ),
    Surface(
        name="the OpenAI API of LLM endpoints (its LLM-specific cases: the LLM module)",
        routes=("POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models"),
        cases={
            Abuse.OVERSIZED: ("tests/gateway/test_bodybounds.py::test_bounds",),
            Abuse.MALFORMED: (f"{LLM}::test_bad_requests_get_the_openai_error_shape",),
            Abuse.FLOOD: (
                f"{LLM}::test_token_quota_429_with_retry_after_and_streams_limit",
                f"{LLM}::test_anonymous_callers_of_a_public_endpoint_share_one_cap_and_leave_the_others_alone",
            ),
            Abuse.SLOW: (f"{LLM}::test_a_slow_reader_sets_its_own_gaps_and_they_are_not_the_variants_itl",),
            Abuse.HALF_OPEN: (f"{LLM}::test_client_disconnect_mid_stream_cancels_the_upstream",),
            Abuse.FOREIGN_OBJECTS: (f"{LLM}::test_models_keys_and_no_name_oracle",),
        },
    ),
    Surface(
        name="the control port (/metrics, /status, health off the event loop: gateway/process/control.py)",
        routes=tuple(f"control GET {path}" for path in CONTROL_PATHS),
        cases={
            Abuse.SECRET_EXFILTRATION: (f"{CONTROL}::test_operator_pages_need_the_token_and_health_says_nothing_more",),
            Abuse.FLOOD: (f"{CONTROL}::test_a_connection_flood_costs_bounded_threads_and_nothing_on_the_data_path",),
            Abuse.HALF_OPEN: (
                f"{CONTROL}::test_a_connection_flood_costs_bounded_threads_and_nothing_on_the_data_path",
            ),
            Abuse.SLOW: (f"{CONTROL}::test_a_connection_flood_costs_bounded_threads_and_nothing_on_the_data_path",),
            Abuse.SSRF: (f"{CONTROL}::test_no_tenant_url_may_point_at_the_control_port",),
            Abuse.LOOP: (f"{CONTROL}::test_no_tenant_url_may_point_at_the_control_port",),
            Abuse.MALFORMED: (f"{CONTROL}::test_operator_pages_need_the_token_and_health_says_nothing_more",),
        },
        not_applicable={Abuse.OVERSIZED: "GET only: a body is never read", Abuse.FOREIGN_OBJECTS: NO_URL},
    ),
]
