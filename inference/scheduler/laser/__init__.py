"""The tier-aware ``laser`` policy, composed of parts (``LaserParts``: contract, demotion,
aging, cold pacing and admission, the fill's caps, the hot reserve, hot triage; and the layer
pause), each in its own module."""

from inference.scheduler.laser.assembly import LaserParts
from inference.scheduler.laser.config import LaserPolicyConfig
from inference.scheduler.laser.policy import LaserScheduler

__all__ = ["LaserParts", "LaserPolicyConfig", "LaserScheduler"]
