"""Training datasets: the build a team asks for (an endpoint, an experiment, a window, a name)
through the API, the CLI (over the same API) and manage.py build_dataset, the pages that show
them, and the capture share that decides what is logged for them."""

from tests.adversarial.registry import Abuse, Surface

ABUSE = "tests/adversarial/test_dataset_abuse.py::test_dataset_abuse_is_refused_and_the_neighbour_holds"
API = "tests/experiments/test_datasets_api.py"
BUILD = "tests/experiments/test_datasets.py"
PAGES = "tests/experiments/test_datasets_pages.py"

SURFACES = [
    Surface(
        name="datasets: builds from an endpoint's captured requests, their versions and pages",
        routes=(
            "GET /api/v1/datasets/",
            "POST /api/v1/datasets/",
            "GET /api/v1/datasets/{pk}/",
            "page /experiments/datasets/",
            "page /experiments/datasets/{dataset_id}/",
            "field datasets.start",
            "field datasets.end",
            "field endpoints.capture_share",
        ),
        cases={
            Abuse.FOREIGN_OBJECTS: (
                ABUSE,
                "tests/security/test_cross_team_matrix.py::test_cross_team_matrix",
                f"{API}::test_bad_input_is_a_400_naming_it_and_writes_nothing",
                f"{API}::test_build_list_and_detail_through_the_api",
                f"{PAGES}::test_list_and_detail_show_lineage_statistics_and_trained_versions",
            ),
            Abuse.OVERSIZED: (ABUSE, f"{BUILD}::test_bad_windows_and_mixed_inputs_write_nothing"),
            Abuse.MALFORMED: (
                ABUSE,
                f"{API}::test_bad_input_is_a_400_naming_it_and_writes_nothing",
                f"{API}::test_capture_share_out_of_range_is_a_400_naming_it",
                f"{BUILD}::test_bad_windows_and_mixed_inputs_write_nothing",
            ),
            Abuse.FLOOD: (ABUSE,),
            Abuse.COLLIDING_IDS: (
                f"{API}::test_build_list_and_detail_through_the_api",  # a name built twice is its next version
            ),
        },
        not_applicable={
            Abuse.SSRF: "no URL is taken: the rows come from the team's own captures in the store",
            Abuse.LOOP: "no target is taken",
            Abuse.SECRET_EXFILTRATION: "a dataset holds the team's own captured inputs and clicks; no server path "
            "is shown (the API omits the Parquet folder)",
            Abuse.SLOW: "the web server's request timeouts, as every API route",
            Abuse.HALF_OPEN: "the web server's request timeouts, as every API route",
            Abuse.FORGERY: "token auth, as every API route; builds need the deployer role in the endpoint's team",
        },
    ),
]
