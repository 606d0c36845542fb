"""OpenAI-compatible Files and Batches API: one view class per resource, logic in services.

Everything is scoped to the API key's tenant: another tenant's file or batch is a 404.
"""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.batches import files as file_services
from apps.batches import services, uploads
from apps.batches.presenters import batch_object, file_object, list_object
from apps.batches.selectors import batches_list, request_counts_many
from apps.batches.storage import PART_BYTES
from apps.core.errors import BadRequestError
from apps.core.jsonbody import BoundedJSONParser


def _limit(request: Request, default: int, maximum: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise BadRequestError(f"'limit' must be an integer between 1 and {maximum}.",
                              param="limit", code="invalid_value")
    return int(raw)


def _expires_after(data: Any) -> dict | None:
    """``expires_after`` from a multipart form (``expires_after[anchor]`` fields) or JSON."""
    value = data.get("expires_after")
    if value is not None:
        return value
    anchor, seconds = data.get("expires_after[anchor]"), data.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    return {"anchor": anchor, "seconds": seconds}


class FileListCreateApi(APIView):
    parser_classes = [MultiPartParser, FormParser]

    def get(self, request: Request) -> Response:
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise BadRequestError("'order' must be 'asc' or 'desc'.", param="order")
        page, has_more = file_services.files_list(
            tenant=request.user.tenant, purpose=request.query_params.get("purpose"),
            after=request.query_params.get("after"), limit=_limit(request, 10_000, 10_000),
            order=order)
        return Response(list_object([file_object(f) for f in page], has_more))

    def post(self, request: Request) -> Response:
        uploads.cap(request, tenant=request.user.tenant)  # before the body is parsed
        upload = request.FILES.get("file")
        if upload is None:
            raise BadRequestError("'file' is required.", param="file",
                                  code="missing_required_parameter")
        purpose = request.data.get("purpose")
        if not purpose:
            raise BadRequestError("'purpose' is required.", param="purpose",
                                  code="missing_required_parameter")
        ttl = file_services.expiry_seconds(_expires_after(request.data), param="expires_after")
        created = file_services.file_create(
            tenant=request.user.tenant, filename=upload.name or "upload.jsonl",
            content=upload.chunks(PART_BYTES), size=upload.size, purpose=purpose,
            expires_after_s=ttl)
        return Response(file_object(created))


class FileDetailApi(APIView):
    def get(self, request: Request, file_id: str) -> Response:
        return Response(file_object(file_services.file_get(tenant=request.user.tenant,
                                                           file_id=file_id)))

    def delete(self, request: Request, file_id: str) -> Response:
        file_services.file_delete(tenant=request.user.tenant, file_id=file_id)
        return Response({"id": file_id, "object": "file", "deleted": True})


class _AnyAccept(BaseContentNegotiation):
    """The content is bytes whatever the client accepts (the openai SDK asks for
    ``application/binary``); errors still render with the first renderer (JSON)."""

    def select_parser(self, request: Request, parsers: list) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: list, format_suffix: Any = None):
        return renderers[0], renderers[0].media_type


class FileContentApi(APIView):
    content_negotiation_class = _AnyAccept

    def get(self, request: Request, file_id: str) -> StreamingHttpResponse:
        found, chunks = file_services.file_content(tenant=request.user.tenant, file_id=file_id)
        response = StreamingHttpResponse(chunks, content_type="application/jsonl")
        response["Content-Length"] = str(found.bytes)
        return response


class BatchListCreateApi(APIView):
    parser_classes = [BoundedJSONParser]

    def get(self, request: Request) -> Response:
        page, has_more = batches_list(tenant=request.user.tenant,
                                      after=request.query_params.get("after"),
                                      limit=_limit(request, 20, 100))
        counts = request_counts_many(page)
        return Response(list_object([batch_object(b, counts[b.pk]) for b in page], has_more))

    def post(self, request: Request) -> Response:
        data = request.data
        if not isinstance(data, dict):
            raise BadRequestError("The request body must be a JSON object.", code="invalid_json")
        for name in ("input_file_id", "endpoint", "completion_window"):
            if data.get(name) in (None, ""):
                raise BadRequestError(f"'{name}' is required.", param=name,
                                      code="missing_required_parameter")
        batch = services.batch_create(
            tenant=request.user.tenant, api_key=request.user.api_key,
            input_file_id=data["input_file_id"], endpoint=data["endpoint"],
            completion_window=data["completion_window"], metadata=data.get("metadata"),
            output_expires_after=data.get("output_expires_after"))
        return Response(batch_object(batch))


class BatchDetailApi(APIView):
    def get(self, request: Request, batch_id: str) -> Response:
        return Response(batch_object(services.batch_get(tenant=request.user.tenant,
                                                        batch_id=batch_id)))


class BatchCancelApi(APIView):
    def post(self, request: Request, batch_id: str) -> Response:
        return Response(batch_object(services.batch_cancel(tenant=request.user.tenant,
                                                           batch_id=batch_id)))
