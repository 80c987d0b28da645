"""Exit codes a CI job can act on (docs/cli.md lists them; keep the two in step)."""

OK = 0
ERROR = 1  # unexpected: the server answered something the CLI does not understand
USAGE = 2  # bad options or arguments (click's own code)
AUTH = 3  # no token, a token the server refuses (401), or not allowed (403)
API = 4  # the API refused the request: bad input, not found, conflict (stale generation), too large
NETWORK = 5  # cannot reach the server, no answer in time, or a 5xx
TIMEOUT = 6  # gave up waiting (--timeout) for a build or a rollout that is still going
BUILD_FAILED = 10  # the build ended failed or cancelled
ROLLED_BACK = 11  # the rollout ended rolled back by the judge (or the platform)
ROLLOUT_FAILED = 12  # the rollout ended failed (the candidate never became ready)
PAUSED = 13  # the rollout is paused and waits for a person (watch stops there unless --through-pause)
ABORTED = 14  # the rollout ended rolled back by a person (`rollout abort` / `rollout rollback`)
EXPERIMENT_STOPPED = 15  # the experiment ended without shipping (stopped, or decided to stop)
INTERRUPTED = 130  # Ctrl-C while waiting; the build or rollout goes on server-side

# (code, name, meaning) in the order docs/cli.md shows them.
TABLE = [
    (OK, "ok", "success (a build succeeded, a rollout succeeded)"),
    (ERROR, "error", "unexpected answer (not the modelplane API?)"),
    (USAGE, "usage", "bad options or arguments"),
    (AUTH, "auth", "not logged in, token refused (401) or not allowed (403)"),
    (API, "api", "the API refused the request (400/404/409/413…); its detail and code are printed"),
    (NETWORK, "network", "server unreachable, no answer in time, or a 5xx"),
    (TIMEOUT, "timeout", "--timeout passed while waiting; the build or rollout goes on"),
    (BUILD_FAILED, "build-failed", "the build failed or was cancelled"),
    (ROLLED_BACK, "rolled-back", "the judge rolled the rollout back (or the platform: a plan that no longer holds)"),
    (ROLLOUT_FAILED, "rollout-failed", "the rollout failed (candidate never ready)"),
    (PAUSED, "paused", "the rollout is paused, waiting for a person (`--through-pause` keeps watching)"),
    (ABORTED, "aborted", "a person rolled the rollout back (`rollout abort` / `rollout rollback`)"),
    (EXPERIMENT_STOPPED, "experiment-stopped", "the experiment ended without shipping (stopped, or decided to stop)"),
    (INTERRUPTED, "interrupted", "Ctrl-C while waiting"),
]


class CliError(Exception):
    """An error the CLI reports and exits with: `message` for people, `code` for machines."""

    def __init__(
        self,
        exit_code: int,
        message: str,
        *,
        api_code: str | None = None,
        status: int | None = None,
        errors: dict | None = None,
    ):
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message
        self.api_code = api_code
        self.status = status
        self.errors = errors or {}

    def as_dict(self) -> dict:
        body = {"detail": self.message, "exit_code": self.exit_code}
        if self.api_code:
            body["code"] = self.api_code
        if self.status:
            body["status"] = self.status
        if self.errors:
            body["errors"] = self.errors
        return {"error": body}
