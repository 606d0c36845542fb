"""The Files and Batches API routes."""

from __future__ import annotations

from django.urls import path

from apps.batches import api

urlpatterns = [
    path("v1/files", api.FileListCreateApi.as_view(), name="files"),
    path("v1/files/<str:file_id>", api.FileDetailApi.as_view(), name="file"),
    path("v1/files/<str:file_id>/content", api.FileContentApi.as_view(), name="file-content"),
    path("v1/batches", api.BatchListCreateApi.as_view(), name="batches"),
    path("v1/batches/<str:batch_id>", api.BatchDetailApi.as_view(), name="batch"),
    path("v1/batches/<str:batch_id>/cancel", api.BatchCancelApi.as_view(), name="batch-cancel"),
]
