"""Trace-driven simulator: the real scheduler and KV block manager, a calibrated cost model
for step times, and the platform's SLO accounting. ``python -m sim --help``."""

from sim.config import Contracts, SimConfig
from sim.loop import simulate

__all__ = ["Contracts", "SimConfig", "simulate"]
