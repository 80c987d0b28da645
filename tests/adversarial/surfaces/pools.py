"""Serving pools as tenant input: a Kubernetes pool's spec (driver, namespace, image,
repository secret, resources) and the Secret bindings that say what a team may name; and
the LLM model-directory archive a team uploads (registry/llm_archive.py)."""

from tests.adversarial.registry import Abuse, Surface

SPECS = "tests/adversarial/test_pools_specs.py::test_reds_pool_specs_and_archives_are_refused_while_blue_serves"
POLICY = "tests/deployments/test_pool_policy.py"
CONFINEMENT = "tests/deployments/test_pool_confinement.py"

SURFACES = [
    Surface(
        name="pool specs",
        routes=(
            "POST /api/v1/pools/",
            "PATCH /api/v1/pools/{name}/",
            "PUT /api/v1/pools/{name}/",
            "field pools.driver",
            "field pools.namespace",
            "field pools.image",
            "field pools.repository_secret",
            "field pools.resources",
        ),
        cases={
            # the platform's namespace, another team's, a foreign registry's image, another team's pool
            Abuse.FOREIGN_OBJECTS: (
                SPECS,
                f"{CONFINEMENT}::test_reds_foreign_namespace_image_and_secret_are_each_a_400_naming_the_rule",
                f"{CONFINEMENT}::test_a_row_written_around_the_api_renders_nothing",
            ),
            # the platform's own Secret, another team's bound Secret, the platform's admin key
            Abuse.SECRET_EXFILTRATION: (
                SPECS,
                f"{CONFINEMENT}::test_blues_pool_renders_in_its_namespace_with_its_own_key_and_nothing_of_the_platforms",
                f"{CONFINEMENT}::test_the_driver_applies_nothing_for_a_bypassing_row",
            ),
            Abuse.OVERSIZED: (
                SPECS,
                "tests/deployments/test_pool_fields_api.py",
            ),  # resources past one replica's bounds
            Abuse.MALFORMED: (SPECS, f"{POLICY}::test_other_images_are_refused_naming_the_rule"),
        },
        not_applicable={
            Abuse.SSRF: "the control plane never fetches model_repository; a pool's pods reach DNS and "
            "POOL_EGRESS_CIDRS only (their NetworkPolicy)",
            Abuse.LOOP: "a pool spec names no URL the platform calls",
            Abuse.SLOW: "a JSON body under the API's size limit, read by the web server before the view",
            Abuse.HALF_OPEN: "as above: no stream",
            Abuse.FLOOD: "pool creation needs the deployer role; each pool counts against its team's names",
            Abuse.COLLIDING_IDS: "pool names are global and another team's reads as taken (no oracle): "
            "tests/security/test_name_oracle.py",
            Abuse.FORGERY: "no token or signature in a pool spec",
        },
    ),
    Surface(
        name="pool secret bindings",
        routes=(
            "GET /api/v1/pool-secret-bindings/",
            "POST /api/v1/pool-secret-bindings/",
            "GET /api/v1/pool-secret-bindings/{pk}/",
            "DELETE /api/v1/pool-secret-bindings/{pk}/",
        ),
        cases={
            Abuse.FOREIGN_OBJECTS: (
                SPECS,
                f"{CONFINEMENT}::test_only_platform_admins_bind_and_members_see_their_teams_bindings",
                f"{CONFINEMENT}::test_a_secret_serves_one_team_and_stays_bound_while_a_pool_names_it",
            ),
            Abuse.SECRET_EXFILTRATION: (
                f"{CONFINEMENT}::test_an_admin_cannot_bind_the_platforms_secrets_or_outside_the_teams_namespaces",
            ),
        },
        not_applicable={
            Abuse.SSRF: "no URL",
            Abuse.LOOP: "no URL",
            Abuse.OVERSIZED: "names bounded by the serializer (63 and 253 characters) and DNS-1123",
            Abuse.SLOW: "a small JSON body",
            Abuse.HALF_OPEN: "no stream",
            Abuse.FLOOD: "writes are platform admins' only",
            Abuse.COLLIDING_IDS: "one Secret in a namespace serves one team (409 secret_bound_elsewhere)",
            Abuse.MALFORMED: "names checked as DNS-1123 subdomains (400 bad_secret_name)",
            Abuse.FORGERY: "no token or signature",
        },
    ),
    Surface(
        name="LLM model-directory archive",
        routes=("POST /api/v1/models/{model_name}/llm-versions/", "field llm-versions.archive"),
        cases={
            Abuse.MALFORMED: (
                SPECS,
                "tests/registry/test_llm_versions.py::test_hostile_archives_are_refused_and_leave_nothing",
                "tests/registry/test_llm_versions.py::test_an_archive_made_with_tar_dash_c_dot_loads",
            ),
            Abuse.OVERSIZED: (SPECS,),  # more members than LLM_MAX_FILES
            Abuse.SECRET_EXFILTRATION: (
                "tests/registry/test_llm_versions.py::test_hostile_archives_are_refused_and_leave_nothing",
            ),  # links to /etc/passwd, paths out of the directory
        },
        not_applicable={
            Abuse.SSRF: "an archive names no URL",
            Abuse.LOOP: "an archive names no URL",
            Abuse.SLOW: "the upload is read by the web server under MAX_UPLOAD_MB before the view",
            Abuse.HALF_OPEN: "as above",
            Abuse.FLOOD: "uploads need the developer role; each is one version",
            Abuse.COLLIDING_IDS: "stored content-addressed (sha256); versions numbered by the server",
            Abuse.FOREIGN_OBJECTS: "another team's model reads as not found (the cross-team matrix)",
            Abuse.FORGERY: "no token or signature",
        },
    ),
]
