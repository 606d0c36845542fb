"""Project URLs. Apps own their routes; add an app's urls module here with one ``include``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from laser_platform.openapi import OpenApiView

urlpatterns = [
    path("", include("apps.core.urls")),
    path("", include("apps.web.urls")),
    path("", include("apps.tenants.urls")),
    path("", include("apps.gateway.urls")),
    path("", include("apps.batches.urls")),
    path("", include("apps.slo.urls")),
    path("v1/openapi.json", OpenApiView.as_view(), name="openapi"),
    path("admin/", admin.site.urls),
]

handler400 = "apps.core.errors.handler400"
handler403 = "apps.core.errors.handler403"
handler404 = "apps.core.errors.handler404"
handler500 = "apps.core.errors.handler500"
