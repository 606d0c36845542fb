"""Cold tier: OpenAI-compatible Files and Batches API, run by Celery against the engine."""
