"""python -m bench NAME: run one benchmark (artifacts, gateway, gateway_abuse, rollback, gpu, build_box, replies, experiments, tune, llm, llm_tools, judge, gr, idle); each prints a
table and writes var/bench/NAME.json. Benchmarks are never timed tests. `gpu` imports no
Django (it runs on GPU hosts without it): the settings module is only named here."""

import importlib
import os
import sys

NAMES = (
    "artifacts",
    "gateway",
    "gateway_abuse",
    "rollback",
    "gpu",
    "build_box",
    "replies",
    "experiments",
    "experiments_e2e",
    "collector",
    "tune",
    "llm",
    "llm_tools",
    "judge",
    "gr",
    "idle",
)


def main() -> int:
    # the gateways a benchmark starts listen on loopback: their /metrics are read without a token
    os.environ.setdefault("GATEWAY_METRICS_OPEN", "1")
    if len(sys.argv) < 2 or sys.argv[1] not in NAMES:
        print(f"usage: python -m bench {{{','.join(NAMES)}}} [options]", file=sys.stderr)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    module = importlib.import_module(f"bench.{sys.argv[1]}")
    return module.main(sys.argv[2:]) or 0


if __name__ == "__main__":
    sys.exit(main())
