"""A longer schemathesis run than ``make test``'s: every operation of ``/v1/openapi.json``, with
``--examples`` positive and as many negative requests each, random (not derandomized) examples.

    DATABASE_URL=postgres://... .venv/bin/python bench/fuzz_api.py --examples 100
    DATABASE_URL=postgres://... .venv/bin/python bench/fuzz_api.py --paths /v1/completions
    DATABASE_URL=postgres://... .venv/bin/python bench/fuzz_api.py --examples 0 --links 100

It builds what the test builds (``tests/test_openapi_fuzz.py``): a throwaway PostgreSQL test
database, a tenant with a contract per tier, a key, a file and a batch, the real engine over the
tiny random model (``max_model_len`` 256) and uvicorn on a free port; then fuzzes with the same
checks (no 5xx, documented statuses and response schemas, OpenAI error object on every 4xx).
Prints requests and statuses per operation and every failure with a curl command, and writes
``bench/out/fuzz_api.json``. ``--links N`` adds N stateful scenarios over Files and Batches that
follow the schema's links (upload -> content, upload -> batch -> retrieve / cancel). Exit
status 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "laser_platform.settings")


def _setup_database() -> tuple[object, str]:
    import django
    from django.db import connection
    from django.test.utils import setup_test_environment

    django.setup()
    if connection.vendor != "postgresql":
        raise SystemExit("set DATABASE_URL=postgres://... (the live server needs PostgreSQL)")
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"test_fuzz_api_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    return connection, old_name


def _world() -> dict[str, str]:
    from django.conf import settings

    from apps.batches import enqueue
    from apps.tenants.services import api_key_create, tenant_create
    from tests.openapi_fuzz import make_world

    settings.LASER_SLO_AUTOFLUSH = False
    settings.LASER_RATELIMIT_REDIS_URL = ""
    enqueue.after_commit = lambda *args: None  # no broker, no worker: batches stay queued
    tenant = tenant_create(name="Fuzz", slug="fuzz")
    return make_world(tenant, *api_key_create(tenant=tenant))


def _links(url: str, key: str, scenarios: int) -> object:
    from hypothesis.errors import FlakyStrategyDefinition

    from tests.openapi_fuzz import Report, fuzz_links

    try:
        return fuzz_links(url, key, scenarios=scenarios, steps=6)
    except FlakyStrategyDefinition as exc:  # see fuzz_links
        print(f"stateful run stopped early by Hypothesis: {str(exc).splitlines()[0]}")
        return Report()


def _merge(first: object, second: object) -> object:
    for label, statuses in second.statuses.items():
        for status, n in statuses.items():
            first.statuses.setdefault(f"{label} (links)", {})[status] = n
    first.requests += second.requests
    first.failures += second.failures
    return first


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="per operation and mode")
    parser.add_argument("--paths", nargs="*", help="only these paths (default: all)")
    parser.add_argument("--links", type=int, default=0, help="stateful scenarios (6 steps)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "fuzz_api.json")
    args = parser.parse_args()

    connection, old_name = _setup_database()
    from apps.gateway.engine_client import set_engine_client
    from apps.slo.services import flush_reports
    from tests.apps.gateway.live import LiveServer, start_engine, write_tiny_model
    from tests.openapi_fuzz import PATH_PARAMETERS, Report, fuzz

    engine, server = None, LiveServer()
    try:
        world = _world()
        with tempfile.TemporaryDirectory() as tmp:
            engine = start_engine(str(write_tiny_model(Path(tmp) / "tiny.gguf")),
                                  max_model_len=256)
        set_engine_client(engine)
        server.start()
        started = time.monotonic()
        report = Report()
        if args.examples:
            report = fuzz(server.url, world["key"], examples=args.examples, paths=args.paths,
                          path_parameters={k: world[k] for k in PATH_PARAMETERS})
        if args.links:
            report = _merge(report, _links(server.url, world["key"], args.links))
        elapsed = time.monotonic() - started
        flush_reports()
    finally:
        server.stop()
        if engine is not None:
            engine.stop()
        from tests.apps.gateway.live import close_server_connections

        close_server_connections()
        connection.creation.destroy_test_db(old_name, verbosity=0)

    print(f"{'operation':44} {'requests':>8}  statuses")
    for label, statuses in report.statuses.items():
        counts = ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items()))
        print(f"{label:44} {sum(statuses.values()):8}  {counts}")
    print(f"\n{report.requests} requests in {elapsed:.0f} s, {len(report.failures)} failures")
    for failure in report.failures:
        print(f"- {failure}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "examples_per_operation_and_mode": args.examples, "requests": report.requests,
        "seconds": round(elapsed, 1), "statuses": report.statuses,
        "failures": report.failures}, indent=1))
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
