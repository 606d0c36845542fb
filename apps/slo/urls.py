"""The SLO API, the dashboard and ``/metrics`` routes."""

from __future__ import annotations

from django.urls import path

from apps.slo import api, dashboard
from apps.slo.metrics import metrics_view

urlpatterns = [
    path("api/slo/contracts", api.ContractListApi.as_view(), name="slo-contracts"),
    path("api/slo/contracts/<str:tier>", api.ContractUpdateApi.as_view(),
         name="slo-contract-update"),
    path("api/slo/fulfilment", api.FulfilmentApi.as_view(), name="slo-fulfilment"),
    path("api/slo/fulfilment.csv", api.FulfilmentCsvApi.as_view(), name="slo-fulfilment-csv"),
    path("api/slo/usage", api.UsageApi.as_view(), name="slo-usage"),
    path("api/slo/usage.csv", api.UsageCsvApi.as_view(), name="slo-usage-csv"),
    path("metrics", metrics_view, name="metrics"),
    path("dashboard/", dashboard.dashboard_page, name="slo-dashboard"),
    path("dashboard/requests/", dashboard.window_requests, name="slo-window-requests"),
    path("dashboard/data.json", dashboard.dashboard_data_view, name="slo-dashboard-data"),
    path("dashboard/login/", dashboard.LoginView.as_view(), name="slo-login"),
    path("dashboard/logout/", dashboard.LogoutView.as_view(), name="slo-logout"),
]
