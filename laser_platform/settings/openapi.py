"""The published OpenAPI schema (``/v1/openapi.json``, ``laser_platform/openapi.py``)."""

from __future__ import annotations

SPECTACULAR_SETTINGS = {
    "TITLE": "Laser API",
    "DESCRIPTION": "OpenAI-compatible inference (chat completions, completions, files, "
                   "batches) and Laser's SLO and key APIs. Errors use OpenAI's error object.",
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "PREPROCESSING_HOOKS": ["laser_platform.openapi.only_the_api"],
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "laser_platform.openapi.add_plain_views"],
    "COMPONENT_SPLIT_REQUEST": True,
}
