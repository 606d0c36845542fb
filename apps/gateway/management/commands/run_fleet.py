"""``python manage.py run_fleet``: deploy the engine on Ray Serve for ``LASER_ENGINE_MODE=ray``.

Joins the Ray cluster at ``LASER_RAY_ADDRESS`` and runs the ``LASER_RAY_APP`` application:
``--replicas`` engine replicas of this settings' engine configuration, routed by Laser's
router (``inference.fleet.serve``). The replicas live on in the cluster after the command
returns; ``serve shutdown`` (Ray's CLI) removes them. See docs/deploy.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Deploy the engine replicas on a Ray cluster (Ray Serve)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--replicas", type=int, default=2)
        parser.add_argument("--cpus", type=float, default=1.0,
                            help="CPUs each replica reserves (a replica per CPU socket).")
        parser.add_argument("--gpus", type=float, default=0.0,
                            help="GPUs each replica reserves (1: a replica per GPU).")

    def handle(self, *args: Any, **options: Any) -> None:
        import ray

        from apps.gateway.engine_client import engine_config
        from inference.fleet.serve import deploy

        ray.init(address=settings.LASER_RAY_ADDRESS, log_to_driver=False)
        config = dataclasses.asdict(engine_config())
        deploy(config, num_replicas=options["replicas"], name=settings.LASER_RAY_APP,
               num_cpus=options["cpus"], num_gpus=options["gpus"])
        self.stdout.write(f"{options['replicas']} engine replicas serving as "
                          f"{settings.LASER_RAY_APP!r} on Ray Serve")
