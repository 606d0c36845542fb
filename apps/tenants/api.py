"""Tenant-scoped API: ``GET /api/keys`` lists the caller's tenant's keys (never hashes)."""

from __future__ import annotations

from rest_framework import authentication, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import PermissionDeniedError
from apps.tenants.authentication import ApiKeyAuthentication
from apps.tenants.selectors import api_keys_for_tenant, tenant_for_user


class ApiKeyListApi(APIView):
    # Members logged into the site may use their session; scripts use a key.
    authentication_classes = [ApiKeyAuthentication, authentication.SessionAuthentication]

    class OutputSerializer(serializers.Serializer):
        prefix = serializers.CharField()
        name = serializers.CharField()
        default_tier = serializers.CharField()
        status = serializers.CharField()
        created_at = serializers.DateTimeField()
        last_used_at = serializers.DateTimeField()
        expires_at = serializers.DateTimeField()

    def get(self, request: Request) -> Response:
        tenant = tenant_for_user(request.user)
        if tenant is None:
            raise PermissionDeniedError("This account does not belong to a tenant.")
        data = self.OutputSerializer(api_keys_for_tenant(tenant=tenant), many=True).data
        return Response({"object": "list", "data": data})
