"""OpenAI-compatible endpoints. Thin: the request path lives in ``pipeline``.

Completions are plain async Django views (they stream); the model list is a DRF view, which
brings API-key authentication and the OpenAI error shape through the project's handler.
"""

from __future__ import annotations

import time

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import NotFoundError
from apps.gateway import pipeline
from apps.gateway.params import CHAT, COMPLETIONS, served_model_id

_STARTED = int(time.time())


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    return await pipeline.handle(request, CHAT)


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponseBase:
    return await pipeline.handle(request, COMPLETIONS)


def _model_object() -> dict:
    return {"id": served_model_id(), "object": "model", "created": _STARTED,
            "owned_by": "laser"}


class ModelListApi(APIView):
    def get(self, request: Request) -> Response:
        return Response({"object": "list", "data": [_model_object()]})


class ModelDetailApi(APIView):
    def get(self, request: Request, model_id: str) -> Response:
        if model_id != served_model_id():
            raise NotFoundError(f"The model '{model_id}' does not exist.", param="model",
                                code="model_not_found")
        return Response(_model_object())
