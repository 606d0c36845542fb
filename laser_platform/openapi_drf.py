"""drf-spectacular annotations of the DRF views, kept beside the schema instead of in each app:
view extensions replace each view class with one carrying ``extend_schema`` (the views hold no
serializers spectacular could read), and the API-key authentication gets its security schemes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiViewExtension
from drf_spectacular.utils import OpenApiParameter, extend_schema

from apps.core.tiers import TIERS
from laser_platform.openapi_shapes import error_responses, nullable, ref

_TS = {"type": ["integer", "null"]}
_ID = {"type": ["string", "null"]}
FILE = {
    "type": "object",
    "required": ["id", "object", "bytes", "created_at", "filename", "purpose"],
    "properties": {"id": {"type": "string"}, "object": {"const": "file"},
                   "bytes": {"type": "integer"}, "created_at": {"type": "integer"},
                   "expires_at": _TS, "filename": {"type": "string"},
                   "purpose": {"enum": ["batch", "batch_output"]}, "status": {"type": "string"}},
}
BATCH = {
    "type": "object",
    "required": ["id", "object", "endpoint", "input_file_id", "completion_window", "status",
                 "created_at", "request_counts"],
    "properties": {
        "id": {"type": "string"}, "object": {"const": "batch"}, "endpoint": {"type": "string"},
        "input_file_id": {"type": "string"}, "completion_window": {"type": "string"},
        "status": {"enum": ["validating", "failed", "in_progress", "finalizing", "completed",
                            "expired", "cancelling", "cancelled"]},
        "errors": {"type": ["object", "null"]}, "output_file_id": _ID, "error_file_id": _ID,
        "request_counts": {"type": "object", "required": ["total", "completed", "failed"],
                           "properties": {k: {"type": "integer"}
                                          for k in ("total", "completed", "failed")}},
        "metadata": {"type": ["object", "null"]}, "usage": {"type": ["object", "null"]},
        "model": _ID,
        **{f"{s}_at": _TS for s in ("created", "in_progress", "expires", "finalizing",
                                    "completed", "failed", "expired", "cancelling",
                                    "cancelled")},
    },
}
# PATCH /api/slo/contracts/<tier>: the terms to change (a new contract version), within the
# tenant's plan unless platform staff send them (naming the tenant).
_NUMBER = {"type": "number"}
CONTRACT_UPDATE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "tenant": {"type": "string", "description": "platform staff only: the tenant's slug"},
        **dict.fromkeys(("ttft_p99_s", "tbt_p99_s", "interruption_budget", "demotion_budget",
                         "priority_weight", "warm_rate_tps", "warm_band", "warm_mean_ttft_s",
                         "cold_deadline_s", "cold_percentile"), _NUMBER),
        "demotable": {"type": "boolean"},
        "requests_per_min": {"type": "integer", "minimum": 1},
        "tokens_per_min": {"type": "integer", "minimum": 1},
        "daily_token_budget": {"type": ["integer", "null"], "minimum": 1},
    },
}
_EXPIRY = {"type": "object", "required": ["anchor", "seconds"],
           "properties": {"anchor": {"const": "created_at"},
                          "seconds": {"type": "integer", "minimum": 3600,
                                      "maximum": 30 * 24 * 3600}}}
BATCH_CREATE = {
    "type": "object",
    "required": ["input_file_id", "endpoint", "completion_window"],
    "properties": {
        "input_file_id": {"type": "string", "minLength": 1},
        "endpoint": {"enum": ["/v1/chat/completions", "/v1/completions"]},
        "completion_window": {"type": "string", "pattern": r"^\s*[0-9]+\s*[smhd]\s*$",
                              "description": "e.g. `24h`; within the tenant's cold contract"},
        "metadata": nullable({"type": "object", "maxProperties": 16,
                              "additionalProperties": {"type": "string", "maxLength": 512}}),
        "output_expires_after": nullable(_EXPIRY),
    },
}
FILE_UPLOAD = {
    "type": "object",
    "required": ["file", "purpose"],
    "properties": {"file": {"type": "string", "format": "binary"},
                   "purpose": {"const": "batch"},
                   "expires_after[anchor]": {"const": "created_at"},
                   "expires_after[seconds]": {"type": "string", "pattern": "^[0-9]+$"}},
}


SCHEMAS = {"File": FILE, "Batch": BATCH, "BatchCreateRequest": BATCH_CREATE}


def page(item: dict[str, Any], cursor: bool = True) -> dict[str, Any]:
    props: dict[str, Any] = {"object": {"const": "list"}, "data": {"type": "array",
                                                                   "items": item}}
    if cursor:
        props.update(has_more={"type": "boolean"}, first_id=_ID, last_id=_ID)
    return {"type": "object", "required": ["object", "data"], "properties": props}


def _ok(schema: dict[str, Any], *codes: int, media: str = "application/json") -> dict:
    from drf_spectacular.utils import OpenApiResponse

    ok = (OpenApiResponse(response=schema) if media == "application/json"
          else {(200, media): OpenApiResponse(response=schema)})
    answers = ok if isinstance(ok, dict) else {200: ok}
    errors = {int(code): OpenApiResponse(response=ref("Error"))
              for code in error_responses(*codes)}
    return {**answers, **errors}


def _query(name: str, kind: str = "string", **extra: Any) -> OpenApiParameter:
    return OpenApiParameter(name, {"type": kind, **extra}, OpenApiParameter.QUERY)


_LIMIT = _query("limit", "integer", minimum=1)
_AFTER = _query("after")
_TIME = "ISO 8601 time, date or Unix seconds, between 1970-01-01 and 9000-01-01"
_SLO_FILTER = [_query("tier", enum=[tier.value for tier in TIERS]),
               _query("window", enum=["minute", "hour", "day"]),
               _query("since", description=_TIME), _query("until", description=_TIME),
               _query("tenant", description="staff only: a tenant's slug")]
_DAY_FILTER = [_query("since", format="date"), _query("until", format="date"),
               _query("tenant", description="staff only: a tenant's slug")]
_CSV = {"type": "string"}
_ANY_LIST = page({"type": "object"}, cursor=False)

def op(operation_id: str, responses: dict, **extra: Any) -> dict[str, Any]:
    return {"operation_id": operation_id, "responses": responses, **extra}


# view class path -> {method: extend_schema kwargs}
ANNOTATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "apps.gateway.views.ModelListApi": {"get": op("models_list", _ok(page(
        {"type": "object"}, cursor=False), 401))},
    "apps.gateway.views.ModelDetailApi": {"get": op("models_retrieve",
                                                    _ok({"type": "object"}, 401, 404))},
    "apps.tenants.api.ApiKeyListApi": {"get": op("keys_list", _ok(_ANY_LIST, 401, 403))},
    "apps.batches.api.FileListCreateApi": {
        "get": op("files_list", _ok(page(ref("File")), 400, 401, 404),
                  parameters=[_LIMIT, _AFTER, _query("purpose"),
                              _query("order", enum=["asc", "desc"])]),
        "post": op("files_create", _ok(ref("File"), 400, 401, 413, 415),
                   request={"multipart/form-data": FILE_UPLOAD})},
    "apps.batches.api.FileDetailApi": {
        "get": op("files_retrieve", _ok(ref("File"), 401, 404)),
        "delete": op("files_delete", _ok({"type": "object", "required": ["id", "deleted"]},
                                         401, 404))},
    "apps.batches.api.FileContentApi": {
        "get": op("files_content", _ok(_CSV, 401, 404, media="application/jsonl"))},
    "apps.batches.api.BatchListCreateApi": {
        "get": op("batches_list", _ok(page(ref("Batch")), 400, 401, 404),
                  parameters=[_LIMIT, _AFTER]),
        "post": op("batches_create", _ok(ref("Batch"), 400, 401, 404, 413, 415),
                   request={"application/json": ref("BatchCreateRequest")})},
    "apps.batches.api.BatchDetailApi": {"get": op("batches_retrieve", _ok(ref("Batch"), 401, 404))},
    "apps.batches.api.BatchCancelApi": {"post": op(
        "batches_cancel", _ok(ref("Batch"), 400, 401, 404), request=None)},
    "apps.slo.api.ContractListApi": {"get": op("slo_contracts", _ok(_ANY_LIST, 401, 403),
                                               parameters=[_query("tenant")])},
    "apps.slo.api.ContractUpdateApi": {"patch": op(
        "slo_contract_update", _ok({"type": "object"}, 400, 401, 403, 404),
        request={"application/json": CONTRACT_UPDATE})},
    "apps.slo.api.FulfilmentApi": {"get": op("slo_fulfilment",
                                             _ok({"type": "object"}, 400, 401, 403),
                                             parameters=_SLO_FILTER)},
    "apps.slo.api.FulfilmentCsvApi": {"get": op(
        "slo_fulfilment_csv", _ok(_CSV, 400, 401, 403, media="text/csv"),
        parameters=_SLO_FILTER)},
    "apps.slo.api.UsageApi": {"get": op("slo_usage", _ok(_ANY_LIST, 400, 401, 403),
                                        parameters=_DAY_FILTER)},
    "apps.slo.api.UsageCsvApi": {"get": op(
        "slo_usage_csv", _ok(_CSV, 400, 401, 403, media="text/csv"), parameters=_DAY_FILTER)},
}


def _extension(path: str, methods: dict[str, dict[str, Any]]) -> type:
    def view_replacement(self: OpenApiViewExtension) -> type:
        tag = path.split(".")[1]
        decorated = {m: extend_schema(tags=[tag], **kw)(getattr(self.target_class, m))
                     for m, kw in methods.items()}
        return type(self.target_class.__name__, (self.target_class,), decorated)

    name = "Schema" + path.rsplit(".", 1)[1]
    return type(name, (OpenApiViewExtension,), {"target_class": path,
                                                "view_replacement": view_replacement})


EXTENSIONS = [_extension(path, methods) for path, methods in ANNOTATIONS.items()]


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenants.authentication.ApiKeyAuthentication"
    name = ["bearer", "apiKey"]

    def get_security_requirement(self, auto_schema: Any) -> list[dict[str, list]]:
        return [{"bearer": []}, {"apiKey": []}]  # either header

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [{"type": "http", "scheme": "bearer"},
                {"type": "apiKey", "in": "header", "name": "X-API-Key"}]
