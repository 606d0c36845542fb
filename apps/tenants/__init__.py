"""Tenants, their members and their API keys."""
