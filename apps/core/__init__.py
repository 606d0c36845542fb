"""The bottom floor: the OpenAI error builder, request ids, health/readiness, the component
lifecycle and the embedded ``serve`` process. Imports no other app."""

"""Platform-level app: health/readiness, the component lifecycle and the ``serve`` command."""
