"""The tier-aware ``laser`` policy: reserve, chunking, demotion, borrowing, cold slack,
admission and aging, each in its own module and each switchable in ``LaserAblations``."""

from inference.scheduler.laser.config import LaserAblations, LaserPolicyConfig
from inference.scheduler.laser.policy import LaserScheduler

__all__ = ["LaserAblations", "LaserPolicyConfig", "LaserScheduler"]
