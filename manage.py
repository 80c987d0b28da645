#!/usr/bin/env python
import os
import sys
import threading
import time

# make run (run_platform): loading Django and the apps takes seconds on a busy machine; until
# run_platform's own progress lines take over (it sets this), say so every few seconds
LOADING = threading.Event()


def _say_loading() -> None:
    started = time.monotonic()
    say = "loading Django and the apps…"
    while True:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} make run: {say}", flush=True)
        if LOADING.wait(5.0):
            return
        say = f"still loading Django and the apps ({time.monotonic() - started:.0f} s)"


def main():
    if sys.argv[1:2] == ["run_platform"]:
        threading.Thread(target=_say_loading, name="make-run-loading", daemon=True).start()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
