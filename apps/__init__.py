"""Laser's Django apps."""
