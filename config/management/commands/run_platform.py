"""`make run`: migrate, create the admin login once, seed a demo, then run the web
server, a Celery worker and beat, the local pool supervisor and the inference gateway
in the foreground; Ctrl-C stops them all, and if one dies the rest are stopped too."""

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand


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


class Command(BaseCommand):
    help = "Run the whole platform on this machine (web, worker, beat, pools, gateway) until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=settings.PORT)
        parser.add_argument("--no-seed", action="store_true", help="Skip the demo data.")

    def processes(self, port: int) -> dict[str, list[str]]:
        python = sys.executable
        return {
            "pools": [python, str(settings.BASE_DIR / "manage.py"), "run_pools", "--stop-replicas-on-exit"],
            "gateway": [python, "-m", "gateway", f"--port={settings.GATEWAY_PORT}", "--host=127.0.0.1",
                        f"--routes-url=http://127.0.0.1:{port}/api/v1/gateway/routes"],
            "web": [python, "-m", "gunicorn", "config.wsgi", f"--bind=127.0.0.1:{port}", "--workers=2", "--threads=4",
                    "--timeout=120", "--access-logfile=-", "--log-level=warning"],
            "worker": [python, "-m", "celery", "-A", "config", "worker", "-Q", "control,build-cpu,build-gpu",
                       "--concurrency=2", "--loglevel=INFO", "--without-gossip", "--without-mingle"],
            "beat": [python, "-m", "celery", "-A", "config", "beat", "--loglevel=INFO",
                     f"--schedule={settings.CELERY_BEAT_SCHEDULE_FILENAME}"],
        }

    def handle(self, *args, port, no_seed, **options):
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        ensure_admin(self.stdout)
        if not no_seed:
            call_command("seed_demo")
        gateway_url = f"http://127.0.0.1:{settings.GATEWAY_PORT}"
        env = dict(os.environ, HEALTHZ_EXPECT=f"worker,beat,pools,gateway={gateway_url}", PYTHONUNBUFFERED="1",
                   GATEWAY_TOKEN=ensure_gateway_token(), GATEWAY_EXPOSURE_STREAM_URL=settings.EXPOSURE_STREAM_URL)
        children: dict[str, subprocess.Popen] = {}
        for name, command in self.processes(port).items():
            children[name] = subprocess.Popen(command, env=env, cwd=settings.BASE_DIR, start_new_session=True)
        self.stdout.write(self.style.SUCCESS(f"dashboard: http://127.0.0.1:{port}/   health: http://127.0.0.1:{port}/healthz"))
        self.stdout.write(f"API: http://127.0.0.1:{port}/api/v1/   docs: http://127.0.0.1:{port}/api/docs/   data: {settings.VAR_DIR}")
        self.stdout.write(f"gateway: {gateway_url}/v2/models/{{endpoint}}/infer   (demo endpoint: demo-ctr)")

        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        exit_code = 0
        while not stopping:
            for name, proc in children.items():
                if proc.poll() is not None:
                    self.stderr.write(f"{name} exited with {proc.returncode}; stopping the platform")
                    exit_code, stopping = 1, True
                    break
            time.sleep(0.5)
        for proc in children.values():
            if proc.poll() is None:
                proc.terminate()  # each main process shuts its own children down (warm shutdown)
        deadline = time.monotonic() + 20
        for proc in children.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.stdout.write("stopped")
        sys.exit(exit_code)
