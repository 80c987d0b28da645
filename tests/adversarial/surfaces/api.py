"""The control plane's tenant-facing surfaces: every /api/v1/ route, every dashboard page a
team member reaches, and every registration field that takes a URL, a file, a spec or an
image, with the tests that already attack each (tests/security/, the apps' API tests). Where
another module of this suite adds the cases for a field (LLM backend URLs, pool specs,
feedback volumes), the surface lists what exists today."""

from tests.adversarial.registry import Abuse, Surface

XTEAM = "tests/security/test_cross_team_matrix.py::test_cross_team_matrix"
SCHEMA = "tests/security/test_schemathesis.py::test_live_api_conforms_to_its_schema"
STRICT = "tests/security/test_strict_input.py"
ORACLE = "tests/security/test_name_oracle.py"
MARGIN = "tests/adversarial/test_endpoint_margin.py"
MALFORMED_API = (
    SCHEMA,
    f"{STRICT}::test_a_number_where_the_schema_says_string_is_a_400_and_nothing_changes",
    f"{STRICT}::test_nul_in_a_json_body_is_a_400_naming_where",
    f"{STRICT}::test_json_nested_past_any_sane_depth_is_a_400",
)
READS = "reads the caller's own team's rows: what a tenant sends is a query, bounded and checked"
NO_URL = "takes no URL: nothing is fetched on the tenant's behalf"
NO_SECRET = "no secret passes through it"


def api(*routes):
    return tuple(routes)


SURFACES = [
    Surface(
        name="model catalog: models, versions, aliases, events, teams",
        routes=api(
            "GET /api/v1/models/",
            "POST /api/v1/models/",
            "GET /api/v1/models/{name}/",
            "PUT /api/v1/models/{name}/",
            "PATCH /api/v1/models/{name}/",
            "DELETE /api/v1/models/{name}/",
            "GET /api/v1/models/{model_name}/versions/",
            "GET /api/v1/models/{model_name}/aliases/",
            "POST /api/v1/models/{model_name}/aliases/",
            "GET /api/v1/models/{model_name}/aliases/{alias}/",
            "PUT /api/v1/models/{model_name}/aliases/{alias}/",
            "DELETE /api/v1/models/{model_name}/aliases/{alias}/",
            "GET /api/v1/versions/",
            "GET /api/v1/versions/resolve/",
            "GET /api/v1/versions/{pk}/",
            "POST /api/v1/versions/{pk}/archive/",
            "GET /api/v1/events/",
            "GET /api/v1/events/{pk}/",
            "GET /api/v1/teams/",
        ),
        cases={
            Abuse.MALFORMED: MALFORMED_API + (f"{STRICT}::test_a_garbage_ordering_is_never_a_500",),
            Abuse.FOREIGN_OBJECTS: (
                XTEAM,
                "tests/registry/test_api.py::test_cannot_attach_a_version_to_another_teams_model",
                "tests/registry/test_api.py::test_cannot_create_a_model_in_another_team",
            ),
            Abuse.COLLIDING_IDS: (
                f"{ORACLE}::test_a_model_name_another_team_holds_reads_as_a_reserved_word",
                f"{STRICT}::test_max_length_counts_the_string_as_sent",
            ),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.SECRET_EXFILTRATION: NO_SECRET},
    ),
    Surface(
        name="model files: an ONNX upload, validation data and input examples, an MLflow source URI",
        routes=api(
            "POST /api/v1/models/{model_name}/versions/",
            "field versions.file",
            "field versions.validation_data",
            "field versions.input_example",
            "field versions.source_uri",
            "GET /api/v1/versions/{version_id}/data/",
            "POST /api/v1/versions/{version_id}/data/",
            "DELETE /api/v1/versions/{version_id}/data/",
            "field version-data.file",
        ),
        cases={
            Abuse.OVERSIZED: (
                "tests/registry/test_api.py::test_oversized_upload_is_413",
                "tests/registry/test_version_data.py::test_size_and_row_limits",
            ),
            Abuse.MALFORMED: (
                "tests/registry/test_api.py::test_bad_uploads_are_refused_and_nothing_is_stored",
                "tests/registry/test_version_data.py::test_pickles_are_never_loaded",
                "tests/registry/test_version_data.py::test_data_that_disagrees_with_the_signature_is_refused_naming_what",
                "tests/security/test_small_items.py::test_upload_errors_show_no_server_paths",
            ),
            Abuse.FOREIGN_OBJECTS: (
                "tests/registry/test_version_data.py::test_another_teams_version_is_a_404",
                "tests/registry/test_version_data.py::test_a_validation_dataset_logged_to_the_mlflow_run_is_validated_on_and_outside_files_are_not_read",
                "tests/security/test_mlflow_scope.py::test_a_run_of_another_team_is_not_found",
            ),
            Abuse.SSRF: ("tests/registry/test_api.py::test_mlflow_uri_that_does_not_resolve",),
        },
        not_applicable={Abuse.SECRET_EXFILTRATION: NO_SECRET},
    ),
    Surface(
        name="LLM versions: a model directory archive or a backend reference (base URL, provider secret)",
        routes=api(
            "POST /api/v1/models/{model_name}/llm-versions/",
            "field llm-versions.archive",
            "field llm-versions.base_url",
            "field llm-versions.secret",
        ),
        cases={
            Abuse.MALFORMED: (
                "tests/registry/test_llm_versions.py::test_hostile_archives_are_refused_and_leave_nothing",
                "tests/registry/test_llm_versions.py::test_bad_backend_references_are_400s",
            ),
            Abuse.OVERSIZED: (
                "tests/registry/test_llm_versions.py::test_context_length_past_the_models_own_or_the_bound_is_refused",
            ),
            Abuse.FOREIGN_OBJECTS: ("tests/registry/test_llm_versions.py::test_another_teams_secret_reads_as_unknown",),
            Abuse.SECRET_EXFILTRATION: (
                "tests/registry/test_llm_versions.py::test_a_secret_is_never_shown_again_and_is_encrypted_at_rest",
            ),
        },
    ),
    Surface(
        name="provider secrets",
        routes=api(
            "GET /api/v1/secrets/",
            "POST /api/v1/secrets/",
            "GET /api/v1/secrets/{pk}/",
            "DELETE /api/v1/secrets/{pk}/",
            "page /deployments/keys/secrets/",
            "page /deployments/keys/secrets/{pk}/delete/",
        ),
        cases={
            Abuse.SECRET_EXFILTRATION: (
                "tests/registry/test_llm_versions.py::test_a_secret_is_never_shown_again_and_is_encrypted_at_rest",
                "tests/registry/test_llm_versions.py::test_secret_writes_need_the_admin_role_and_a_secret_in_use_stays",
                "tests/registry/test_llm_versions.py::test_the_admin_console_shows_a_secrets_name_never_its_value",
                "tests/deployments/test_llm_endpoints.py::test_keys_page_stores_a_provider_secret_and_shows_its_value_once",
            ),
            Abuse.FOREIGN_OBJECTS: ("tests/registry/test_llm_versions.py::test_another_teams_secret_reads_as_unknown",),
            Abuse.MALFORMED: MALFORMED_API,
        },
        not_applicable={Abuse.SSRF: NO_URL},
    ),
    Surface(
        name="builds and artifacts",
        routes=api(
            "GET /api/v1/versions/{version_id}/builds/",
            "POST /api/v1/versions/{version_id}/builds/",
            "GET /api/v1/versions/{version_id}/artifacts/",
            "GET /api/v1/builds/",
            "GET /api/v1/builds/{pk}/",
            "POST /api/v1/builds/{pk}/cancel/",
            "GET /api/v1/artifacts/{pk}/",
            "GET /api/v1/artifacts/{pk}/download/",
        ),
        cases={
            Abuse.MALFORMED: MALFORMED_API
            + ("tests/registry/test_build_api.py::test_bad_targets_are_a_400_naming_the_field",),
            Abuse.FOREIGN_OBJECTS: (XTEAM, "tests/registry/test_build_api.py::test_other_teams_see_nothing"),
            Abuse.COLLIDING_IDS: ("tests/registry/test_build_api.py::test_start_build_is_idempotent_per_key",),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.SECRET_EXFILTRATION: NO_SECRET},
    ),
    Surface(
        name="serving pools: specs with namespace, image, repository secret (their cases: the pools module)",
        routes=api(
            "GET /api/v1/pools/",
            "POST /api/v1/pools/",
            "GET /api/v1/pools/{name}/",
            "PUT /api/v1/pools/{name}/",
            "PATCH /api/v1/pools/{name}/",
            "DELETE /api/v1/pools/{name}/",
            "POST /api/v1/pools/{name}/load/",
            "GET /api/v1/pools/{name}/log/",
            "POST /api/v1/pools/{name}/scale/",
            "POST /api/v1/pools/{name}/unload/",
            "field pools.namespace",
            "field pools.image",
            "field pools.repository_secret",
        ),
        cases={
            Abuse.FOREIGN_OBJECTS: (
                XTEAM,
                "tests/deployments/test_pool_fields_api.py::test_bad_pool_fields_are_a_400_naming_the_field",
                "tests/deployments/test_api.py::test_load_of_another_teams_artifact_is_404",
            ),
            Abuse.COLLIDING_IDS: (f"{ORACLE}::test_a_pool_name_another_team_holds_reads_as_unavailable",),
            Abuse.OVERSIZED: ("tests/deployments/test_api.py::test_scale_below_zero_is_400_and_changes_nothing",),
            Abuse.MALFORMED: MALFORMED_API
            + ("tests/deployments/test_api.py::test_bad_pool_input_is_400_naming_the_field",),
        },
    ),
    Surface(
        name="endpoints, rollouts and releases",
        routes=api(
            "GET /api/v1/endpoints/",
            "POST /api/v1/endpoints/",
            "GET /api/v1/endpoints/{name}/",
            "PUT /api/v1/endpoints/{name}/",
            "PATCH /api/v1/endpoints/{name}/",
            "GET /api/v1/endpoints/{name}/rollouts/",
            "POST /api/v1/endpoints/{name}/rollouts/",
            "POST /api/v1/endpoints/{name}/undo/",
            "GET /api/v1/rollouts/",
            "GET /api/v1/rollouts/{pk}/",
            "POST /api/v1/rollouts/{pk}/pause/",
            "POST /api/v1/rollouts/{pk}/promote/",
            "POST /api/v1/rollouts/{pk}/resume/",
            "POST /api/v1/rollouts/{pk}/retry/",
            "POST /api/v1/rollouts/{pk}/rollback/",
            "GET /api/v1/rollouts/{pk}/status/",
            "GET /api/v1/releases/",
            "POST /api/v1/releases/",
            "GET /api/v1/releases/{pk}/",
        ),
        cases={
            Abuse.MALFORMED: MALFORMED_API
            + (f"{STRICT}::test_an_endpoint_name_its_urls_cannot_hold_is_refused_and_nothing_is_created",),
            Abuse.FOREIGN_OBJECTS: (
                XTEAM,
                "tests/deployments/test_llm_endpoints.py::test_another_teams_llm_artifact_reads_as_unknown",
                "tests/deployments/test_releases.py::test_release_api_scopes_and_bounds",
            ),
            Abuse.COLLIDING_IDS: (f"{ORACLE}::test_an_endpoint_name_another_team_holds_reads_as_unavailable",),
            Abuse.FLOOD: (
                "tests/deployments/test_route_isolation_integration.py::test_a_bad_entry_is_refused_alone_while_every_other_change_applies",
            ),
        },
        not_applicable={Abuse.SSRF: NO_URL},
    ),
    Surface(
        name="an endpoint's latency margin: a number the judge reads every look, or null (derived)",
        routes=api("field endpoints.latency_margin"),
        cases={
            Abuse.MALFORMED: (
                f"{MARGIN}::test_a_hostile_margin_is_a_400_naming_the_field_and_changes_nothing",
                f"{MARGIN}::test_the_service_refuses_what_no_door_may_pass",
            ),
            Abuse.OVERSIZED: (f"{MARGIN}::test_a_hostile_margin_is_a_400_naming_the_field_and_changes_nothing",),
            Abuse.FOREIGN_OBJECTS: (f"{MARGIN}::test_another_teams_margin_is_a_404_and_stays",),
        },
        not_applicable={
            Abuse.SSRF: NO_URL,
            Abuse.SECRET_EXFILTRATION: NO_SECRET,
            Abuse.FLOOD: "one number per update; the endpoint API's volume is the surface above's",
        },
    ),
    Surface(
        name="inference keys, and the route table the gateway reads",
        routes=api(
            "GET /api/v1/inference-keys/",
            "POST /api/v1/inference-keys/",
            "GET /api/v1/inference-keys/{pk}/",
            "POST /api/v1/inference-keys/{pk}/revoke/",
            "GET /api/v1/gateway/routes",
        ),
        cases={
            Abuse.SECRET_EXFILTRATION: (
                "tests/deployments/test_keys.py::test_create_returns_the_secret_once_and_stores_only_its_hash",
                "tests/deployments/test_keys.py::test_api_create_shows_the_secret_once_and_lists_prefixes_only",
                "tests/deployments/test_llm_endpoints.py::test_route_entries_backends_fallbacks_and_only_named_secrets",
            ),
            Abuse.FOREIGN_OBJECTS: (
                XTEAM,
                "tests/deployments/test_keys.py::test_api_another_teams_key_is_404",
                "tests/deployments/test_keys.py::test_scope_is_the_named_endpoints_of_the_team_only",
            ),
            Abuse.MALFORMED: (
                "tests/deployments/test_keys.py::test_api_hostile_bodies_are_400",
                "tests/deployments/test_keys.py::test_api_absurd_key_ids_are_404",
                "tests/deployments/test_keys.py::test_api_revoke_reason_with_nul_is_400",
            ),
            Abuse.OVERSIZED: ("tests/deployments/test_keys.py::test_bad_limits_are_refused_naming_the_field",),
        },
        not_applicable={Abuse.SSRF: NO_URL},
    ),
    Surface(
        name="online experiments and feedback at the API (its volume cases: the feedback module)",
        routes=api(
            "GET /api/v1/experiments/",
            "POST /api/v1/experiments/",
            "GET /api/v1/experiments/{pk}/",
            "GET /api/v1/experiments/{pk}/results/",
            "POST /api/v1/experiments/{pk}/ship/",
            "POST /api/v1/experiments/{pk}/start/",
            "POST /api/v1/experiments/{pk}/stop/",
            "POST /api/v1/feedback/",
        ),
        cases={
            Abuse.MALFORMED: (
                "tests/experiments/test_hostile_feedback.py::test_poison_values_are_a_400_at_the_api",
                "tests/experiments/test_online_api.py::test_bad_create_is_a_clear_400",
            ),
            Abuse.FORGERY: (
                "tests/experiments/test_hostile_feedback.py::test_anonymous_and_cross_team_feedback_is_refused_even_on_a_public_endpoint",
                "tests/experiments/test_hostile_feedback.py::test_exposure_tokens_authenticate_only_where_accepted_and_cannot_be_forged",
            ),
            Abuse.COLLIDING_IDS: (
                "tests/experiments/test_hostile_feedback.py::test_ids_are_scoped_per_team_and_duplicates_leak_nothing",
            ),
            Abuse.FLOOD: (
                "tests/experiments/test_hostile_feedback.py::test_feedback_rate_per_key_bounds_the_rows_a_flood_adds",
                "tests/experiments/test_hostile_feedback.py::test_streams_are_trimmed_after_acknowledgement_under_a_flood",
            ),
            Abuse.OVERSIZED: (
                "tests/experiments/test_hostile_feedback.py::test_extreme_values_cannot_stop_analysis_and_one_broken_experiment_never_skips_another",
            ),
        },
        not_applicable={Abuse.SSRF: NO_URL},
    ),
    Surface(
        name="training experiments and runs (MLflow, scoped by team tags)",
        routes=api(
            "GET /api/v1/training-experiments/",
            "GET /api/v1/training-experiments/{experiment_id}/runs/",
            "GET /api/v1/training-experiments/{experiment_id}/runs/{run_id}/",
        ),
        cases={
            Abuse.FOREIGN_OBJECTS: (
                "tests/security/test_mlflow_scope.py::test_a_run_of_another_team_is_not_found",
                "tests/security/test_mlflow_scope.py::test_a_run_of_another_team_inside_our_experiment_is_neither_seen_nor_registered",
            ),
            Abuse.MALFORMED: (f"{STRICT}::test_nul_in_a_query_is_a_json_400_before_any_query",),
        },
        not_applicable={Abuse.SSRF: NO_URL, Abuse.OVERSIZED: READS},
    ),
    Surface(
        name="monitoring reads and the platform's score samples",
        routes=api(
            "GET /api/v1/metrics/",
            "POST /api/v1/score-samples/",
            "GET /api/v1/rollout-forecast/",
            "GET /api/v1/verdicts/",
            "GET /api/v1/verdicts/{pk}/",
        ),
        cases={
            Abuse.MALFORMED: (
                f"{STRICT}::test_metrics_times_with_far_offsets_are_read_in_utc",
                f"{STRICT}::test_an_empty_query_parameter_is_a_400_not_its_default",
                f"{STRICT}::test_the_forecast_documents_its_404",
                "tests/security/test_api_docs.py::test_invalid_query_parameters_are_400_naming_the_parameter",
            ),
            Abuse.FOREIGN_OBJECTS: (XTEAM,),
        },
        not_applicable={
            Abuse.SSRF: NO_URL,
            Abuse.FORGERY: "score samples take staff tokens only (platform components)",
        },
    ),
    Surface(
        name="alerts and silences",
        routes=api(
            "GET /api/v1/alerts/",
            "GET /api/v1/alerts/{pk}/",
            "POST /api/v1/alerts/{pk}/acknowledge/",
            "POST /api/v1/alerts/{pk}/resolve/",
            "GET /api/v1/silences/",
            "POST /api/v1/silences/",
            "GET /api/v1/silences/{pk}/",
            "DELETE /api/v1/silences/{pk}/",
            "POST /api/v1/silences/{pk}/expire/",
        ),
        cases={
            Abuse.MALFORMED: (
                f"{STRICT}::test_an_alert_note_must_be_a_string",
                "tests/monitoring/test_silences.py::test_bad_silences_are_refused_with_the_reason",
            ),
            Abuse.FOREIGN_OBJECTS: (
                XTEAM,
                "tests/monitoring/test_silences.py::test_another_teams_silence_never_silences_my_alerts",
            ),
        },
        not_applicable={Abuse.SSRF: NO_URL},
    ),
    Surface(
        name="notification channels: a webhook URL the platform calls",
        routes=api(
            "GET /api/v1/notification-channels/",
            "POST /api/v1/notification-channels/",
            "DELETE /api/v1/notification-channels/{pk}/",
            "field notification-channels.url",
        ),
        cases={
            Abuse.SSRF: (
                "tests/monitoring/test_outbound.py::test_internal_urls_are_refused",
                "tests/monitoring/test_outbound.py::test_the_issue_scenario_is_refused_at_save",
                "tests/monitoring/test_outbound.py::test_the_issue_scenario_is_refused_at_delivery",
                "tests/monitoring/test_outbound.py::test_delivery_connects_to_the_vetted_address_only",
            ),
            Abuse.OVERSIZED: (
                "tests/monitoring/test_outbound.py::test_redirects_are_not_followed_and_bodies_not_kept",
            ),
            Abuse.FOREIGN_OBJECTS: (XTEAM,),
        },
    ),
    Surface(
        name="dashboard pages and their forms",
        routes=tuple(
            f"page {path}"
            for path in (
                "/models/",
                "/models/new/",
                "/models/builds/",
                "/models/builds/{pk}/",
                "/models/builds/{pk}/cancel/",
                "/models/versions/{pk}/",
                "/models/versions/{pk}/builds/new/",
                "/models/{name}/",
                "/models/{name}/aliases/",
                "/models/{name}/aliases/{alias}/delete/",
                "/models/{name}/versions/new/",
                "/deployments/",
                "/deployments/endpoints/",
                "/deployments/endpoints/new/",
                "/deployments/endpoints/{name}/",
                "/deployments/endpoints/{name}/access/",
                "/deployments/endpoints/{name}/edit/",
                "/deployments/endpoints/{name}/release/",
                "/deployments/endpoints/{name}/rollouts/",
                "/deployments/keys/",
                "/deployments/keys/{pk}/revoke/",
                "/deployments/pools/{name}/",
                "/deployments/pools/{name}/load/",
                "/deployments/pools/{name}/scale/",
                "/deployments/pools/{name}/unload/",
                "/deployments/rollouts/{pk}/{action}/",
                "/experiments/",
                "/experiments/{experiment_id}/",
                "/experiments/{experiment_id}/{action}/",
                "/experiments/training/",
                "/experiments/training/runs/{run_id}/",
                "/experiments/training/{experiment_id}/",
                "/experiments/training/{experiment_id}/compare/",
                "/monitoring/",
                "/monitoring/alerts/",
                "/monitoring/alerts/{pk}/",
                "/monitoring/alerts/{pk}/acknowledge/",
                "/monitoring/alerts/{pk}/resolve/",
                "/monitoring/alerts/silences/",
                "/monitoring/alerts/silences/new/",
                "/monitoring/alerts/silences/{pk}/expire/",
            )
        ),
        cases={
            Abuse.MALFORMED: (
                f"{STRICT}::test_nul_in_a_dashboard_form_is_a_plain_400",
                "tests/registry/test_upload_form.py::test_a_bad_field_is_shown_on_it_and_registers_nothing",
                "tests/security/test_small_items.py::test_dashboard_upload_refuses_names_with_path_parts_like_the_api",
            ),
            Abuse.FORGERY: ("tests/security/test_small_items.py::test_next_redirects_only_to_this_site",),
            Abuse.FOREIGN_OBJECTS: ("tests/registry/test_build_api.py::test_version_page_of_another_team_is_404",),
            Abuse.OVERSIZED: ("tests/registry/test_api.py::test_oversized_upload_is_413",),
        },
        not_applicable={Abuse.SSRF: NO_URL},
    ),
    Surface(
        name="sign-in",
        routes=("page /login/", "page /logout/"),
        cases={
            Abuse.FLOOD: (
                "tests/security/test_lockout.py::test_wrong_passwords_from_one_address_lock_that_address_only",
                "tests/security/test_lockout.py::test_behind_a_trusted_proxy_each_client_is_locked_alone",
            ),
            Abuse.FORGERY: ("tests/security/test_small_items.py::test_login_next_stays_on_this_site",),
        },
        not_applicable={Abuse.SSRF: NO_URL},
    ),
    Surface(
        name="favicon",
        routes=("page /favicon.ico",),
        not_applicable={
            Abuse.SSRF: NO_URL,
            Abuse.OVERSIZED: "a redirect to a static file: it reads no body, no parameter",
            Abuse.FOREIGN_OBJECTS: "names no object",
        },
    ),
]
