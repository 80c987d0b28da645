"""`make run`: migrate, create the admin login once, then run the web server, a Celery
worker and beat, the local pool supervisor and the inference gateway in the foreground
under config.supervisor while a demo is seeded beside them, saying what it does at least
every few seconds until every component answers and the seed is done, then the URLs
(config/startup.py): a child that dies is restarted by itself (with backoff; the others
keep running), /healthz shows restarts and last exits as component
"supervisor", and Ctrl-C (or SIGTERM) stops them all."""

import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from config.experiment_data import event_log_url, experiment_data_said
from config.heartbeats import heartbeat_record
from config.startup import HealthWait, Progress, SeedThread
from config.supervisor import Supervisor

GATEWAY_LINGER_S = 30.0
POLL_S = 0.1  # how often dead children are noticed (a gateway restart must be quick)
HEARTBEAT_EVERY_S = 5.0


def reap_leftovers(log) -> None:
    """At the platform's stop, once its children are gone: the scratch tritonservers of
    builds whose worker did not end them (registry/factory/scratch.py; none is held now)."""
    from registry.factory.scratch import scratch_reap

    try:
        done = scratch_reap()
    except Exception as exc:  # stopping goes on; the next worker's start reaps again
        log(f"reaping scratch tritonservers failed: {exc}")
        return
    if done["killed"] or done["removed"]:
        log(f"reaped scratch tritonservers {done['killed']} and build work dirs {done['removed']}")


def ensure_gateway_token() -> str:
    """The gateway's service account: may read the route table, nothing else."""
    from django.contrib.auth.models import Permission
    from rest_framework.authtoken.models import Token

    User = get_user_model()
    user, created = User.objects.get_or_create(username="gateway", defaults={"email": "gateway@localhost"})
    if created:
        user.set_unusable_password()
        user.save()
    user.user_permissions.add(Permission.objects.get(codename="read_routes", content_type__app_label="deployments"))
    return Token.objects.get_or_create(user=user)[0].key


def ensure_admin(stdout) -> None:
    """Create user `admin` once; its password is kept in VAR_DIR/admin_password (0600)."""
    password_file = Path(settings.VAR_DIR) / "admin_password"
    User = get_user_model()
    if User.objects.filter(username="admin").exists():
        hint = f"password in {password_file}" if password_file.exists() else "password set earlier"
        stdout.write(f"login: admin ({hint})")
        return
    password = secrets.token_urlsafe(12)
    User.objects.create_superuser("admin", "admin@localhost", password)
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")
    stdout.write(f"login: admin / {password}   (shown once; kept in {password_file})")


def ensure_healthz_token() -> str:
    """HEALTHZ_TOKEN, else one made once and kept in VAR_DIR/healthz_token (0600): what
    reads /healthz's components (`curl -H "Authorization: Bearer $(cat var/healthz_token)"`)."""
    if settings.HEALTHZ_TOKEN:
        return settings.HEALTHZ_TOKEN
    token_file = Path(settings.VAR_DIR) / "healthz_token"
    if token_file.exists():
        return token_file.read_text().strip()
    token = secrets.token_urlsafe(32)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token


class Heartbeat(threading.Thread):
    """Records the supervisor's status as heartbeat row "supervisor" (what /healthz shows)
    every few seconds and right after a change, off the supervising loop: a slow or
    locked database never delays a restart, and a database outage is said once."""

    def __init__(self, supervisor: Supervisor, log):
        super().__init__(name="supervisor-heartbeat", daemon=True)
        self.supervisor, self.log = supervisor, log
        self.changed, self.stopping = threading.Event(), threading.Event()

    def poke(self, _status=None) -> None:
        self.changed.set()

    def run(self) -> None:
        failing = False
        while not self.stopping.is_set():
            try:
                heartbeat_record(name="supervisor", detail=self.supervisor.status())
                failing = False
            except Exception as exc:  # noqa: BLE001  (the database is down: keep supervising)
                if not failing:
                    self.log(f"cannot record its heartbeat: {type(exc).__name__}: {exc}")
                failing = True
            finally:
                close_old_connections()
            self.changed.wait(HEARTBEAT_EVERY_S)
            self.changed.clear()


class Command(BaseCommand):
    help = "Run the whole platform on this machine (web, worker, beat, pools, gateway) until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=settings.PORT)
        parser.add_argument("--no-seed", action="store_true", help="Skip the demo data.")
        parser.add_argument(
            "--no-demo-experiment", action="store_true", help="Seed the demo without its experiment (v2 vs v1)."
        )
        parser.add_argument("--no-demo-llm", action="store_true", help="Seed the demo without demo-llm.")

    def log(self, message: str) -> None:
        self.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor: {message}")

    @staticmethod
    def celery_worker(name: str, queues: str, *, concurrency: int, max_tasks_per_child: int = 0) -> list[str]:
        recycle = [f"--max-tasks-per-child={max_tasks_per_child}"] if max_tasks_per_child else []
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "--quiet",
            "worker",
            f"--hostname={name}@%h",
            "-Q",
            queues,
            f"--concurrency={concurrency}",
            "--prefetch-multiplier=1",  # a long task does not hold the next one back in its slot's prefetch
            f"--loglevel={settings.LOG_LEVEL}",
            "--without-gossip",
            "--without-mingle",
            *recycle,
        ]

    def processes(self, port: int) -> dict[str, list[str]]:
        python = sys.executable
        return self.base_processes(port) | self.experiment_data(python)

    @staticmethod
    def experiment_data(python: str) -> dict[str, list[str]]:
        """The embedded experiment store's owner (EXPERIMENT_STORE=chdb): chdb opens its data in
        one process, which ingests the log, runs the analysis tick and builds datasets
        (docs/experiments.md); Celery's ingest and analysis skip meanwhile. None otherwise."""
        from experiments.store import store_is_embedded

        if not store_is_embedded():
            return {}
        return {"experiment-data": [python, str(settings.BASE_DIR / "manage.py"), "run_experiment_data"]}

    def base_processes(self, port: int) -> dict[str, list[str]]:
        python = sys.executable
        return {
            # every 2 s while every pool is steady (a replica's death is seen within that; traffic
            # fails over in the gateway meanwhile), every second while anything moves
            "pools": [
                python,
                str(settings.BASE_DIR / "manage.py"),
                "run_pools",
                "--steady-interval=2",
                "--stop-replicas-on-exit",
            ],
            "gateway": [
                python,
                "-m",
                "gateway",
                f"--port={settings.GATEWAY_PORT}",
                f"--grpc-port={settings.GATEWAY_GRPC_PORT}",
                f"--control-port={settings.GATEWAY_CONTROL_PORT}",
                "--host=127.0.0.1",
                f"--log-level={settings.LOG_LEVEL}",
                f"--routes-url=http://127.0.0.1:{port}/api/v1/gateway/routes",
            ],
            # quiet by default (config/log_filters.py): no access line for polling, no
            # Celery banners, no line per periodic task; LOG_LEVEL=DEBUG shows them all
            "web": [
                python,
                "-m",
                "gunicorn",
                "config.wsgi",
                f"--bind=127.0.0.1:{port}",
                "--workers=2",
                "--threads=4",
                "--timeout=120",
                "--access-logfile=-",
                "--log-level=warning",
                "--logger-class=config.gunicorn_logging.QuietAccessLogger",
            ],
            # two workers: the control loop (judge, collector, reconciles, model loads, the
            # heartbeat /healthz reads) never waits behind a build or a training, which one
            # worker of two slots did at start (the demo's training and an LLM load held both)
            "worker": self.celery_worker("worker", "control", concurrency=2),
            # a fresh child per build: a build's torch and ONNX Runtime (~0.5 GiB) leave with it
            "builder": self.celery_worker("builder", "build-cpu,build-gpu", concurrency=1, max_tasks_per_child=1),
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "config",
                "--quiet",
                "beat",
                f"--loglevel={settings.LOG_LEVEL}",
                f"--schedule={settings.CELERY_BEAT_SCHEDULE_FILENAME}",
            ],
        }

    def announce(self, progress: Progress, port: int, gateway_url: str, waiting: HealthWait) -> None:
        """The URLs, once /healthz is 200 (or the wait gave up: then what is still down)."""
        took = time.monotonic() - waiting.started
        if waiting.down:
            progress.say(f"not up after {took:.0f} s: {', '.join(waiting.down)} (see /healthz); the rest serves")
        else:
            progress.say(f"everything is up ({took:.0f} s after its processes started)")
        self.stdout.write(
            self.style.SUCCESS(f"dashboard: http://127.0.0.1:{port}/   health: http://127.0.0.1:{port}/healthz")
        )
        self.stdout.write(
            f'health per component: curl -H "Authorization: Bearer $(cat {Path(settings.VAR_DIR) / "healthz_token"})" '
            f"http://127.0.0.1:{port}/healthz"
            if not settings.HEALTHZ_TOKEN
            else "health per component: /healthz with Authorization: Bearer $HEALTHZ_TOKEN"
        )
        self.stdout.write(
            f"API: http://127.0.0.1:{port}/api/v1/   docs: http://127.0.0.1:{port}/api/docs/   data: {settings.VAR_DIR}"
        )
        self.stdout.write(f"gateway: {gateway_url}/v2/models/{{endpoint}}/infer   (demo endpoint: demo-ctr)")
        if settings.GATEWAY_GRPC_PORT:
            self.stdout.write(
                f"gateway gRPC (KServe v2): 127.0.0.1:{settings.GATEWAY_GRPC_PORT}   "
                f"(tritonclient.grpc.InferenceServerClient('127.0.0.1:{settings.GATEWAY_GRPC_PORT}'))"
            )

    def handle(self, *args, port, no_seed, no_demo_experiment=False, no_demo_llm=False, **options):
        loading = getattr(sys.modules.get("__main__"), "LOADING", None)  # manage.py's lines while Django loaded
        if loading is not None:
            loading.set()
        progress = Progress(self.stdout.write)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the tiny LLM's save: no progress bar in the log
        with progress.step("migrating the database"):
            call_command("migrate", interactive=False, verbosity=0)
        with progress.step("collecting static files"):
            call_command("collectstatic", interactive=False, verbosity=0)
        with progress.step("creating the admin login"):  # its password hash takes a moment on a busy machine
            ensure_admin(self.stdout)
        gateway_url = f"http://127.0.0.1:{settings.GATEWAY_PORT}"
        healthz_token = ensure_healthz_token()
        processes = self.processes(port)
        progress.say(experiment_data_said())
        expect = "supervisor,worker,beat,pools,feedback" + (
            ",experiment-data" if "experiment-data" in processes else ""
        )
        env = dict(
            os.environ,
            HEALTHZ_EXPECT=f"{expect},gateway={gateway_url}",
            EXPERIMENT_STORE=settings.EXPERIMENT_STORE,
            PYTHONUNBUFFERED="1",
            GATEWAY_TOKEN=ensure_gateway_token(),
            # the gateway's /metrics and /status need a token; its scrapers (worker, web) get the same
            GATEWAY_METRICS_TOKEN=os.environ.get("GATEWAY_METRICS_TOKEN") or secrets.token_urlsafe(32),
            GATEWAY_EXPOSURE_STREAM_URL=settings.EXPOSURE_STREAM_URL,
            GATEWAY_EVENT_LOG_URL=event_log_url(),  # NATS JetStream when one answers (docs/experiments.md)
            GATEWAY_EVENT_LOG_PREFIX=settings.EVENT_LOG_PREFIX,
            HEALTHZ_TOKEN=healthz_token,
        )
        supervisor = Supervisor(
            processes,
            env=env,
            cwd=settings.BASE_DIR,
            log=self.log,
            backoff_max_s=settings.SUPERVISOR_BACKOFF_MAX_S,
            stable_after_s=settings.SUPERVISOR_STABLE_AFTER_S,
            # a killed gateway's workers answer on for GATEWAY_SHUTDOWN_GRACE_S (5 s) beside its
            # restart, then stop by themselves (gateway/process/workers.py); 30 s is only the backstop
            linger_s={"gateway": GATEWAY_LINGER_S},
        )
        # the gateway once the web server answers: it reads its first route table there (started
        # beside it, its first polls fail and it logs a warning about nothing that is wrong)
        first = [name for name in processes if name != "gateway"]
        progress.say(f"starting {', '.join(first)}; the gateway once the web server answers")
        supervisor.start(first)
        # the demo is seeded beside the platform's start (the dashboard answers meanwhile, the
        # pools load its models as they appear); the URLs wait for both
        seeding = SeedThread(self.stdout, progress, no_demo_experiment, no_demo_llm, skip=no_seed)
        seeding.start()
        heartbeat = Heartbeat(supervisor, self.log)
        supervisor.on_change = heartbeat.poke
        heartbeat.start()
        # the URLs once every component answers (meanwhile: what it still waits for)
        waiting = HealthWait(progress, f"http://127.0.0.1:{port}/healthz", healthz_token, list(processes))
        waiting.start()

        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        announced = gateway_started = False
        while not stopping and not seeding.failed:
            if not gateway_started and waiting.web_up.is_set():
                gateway_started = True
                supervisor.start(["gateway"])
                heartbeat.poke()
            supervisor.step()
            if not announced and waiting.ready.is_set() and seeding.done.is_set():
                announced = True
                self.announce(progress, port, gateway_url, waiting)
            time.sleep(POLL_S)
        waiting.stopping.set()
        heartbeat.stopping.set()
        seeding.stop()
        supervisor.stop()
        reap_leftovers(self.log)
        if seeding.failed:
            raise CommandError(seeding.failed)
        self.stdout.write("stopped")
