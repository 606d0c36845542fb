"""Platform-level app: health/readiness, the component lifecycle and the ``serve`` command."""
