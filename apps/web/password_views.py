"""Password reset by e-mail through Django's own views (``EMAIL_BACKEND``: the console in
development, ``LASER_EMAIL_BACKEND`` in production), with the web app's templates."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy


def _days() -> int:
    return max(1, settings.PASSWORD_RESET_TIMEOUT // 86400)


class ResetView(auth_views.PasswordResetView):
    template_name = "web/registration/password_reset_form.html"
    email_template_name = "web/registration/password_reset_email.txt"
    subject_template_name = "web/registration/password_reset_subject.txt"
    success_url = reverse_lazy("password_reset_done")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        self.extra_email_context = {"timeout_days": _days()}
        return super().get_context_data(**kwargs)


class ResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "web/registration/password_reset_done.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "timeout_days": _days()}


class ResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "web/registration/password_reset_confirm.html"
    success_url = reverse_lazy("password_reset_complete")


class ResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "web/registration/password_reset_complete.html"


urlpatterns = [
    path("password-reset/", ResetView.as_view(), name="password_reset"),
    path("password-reset/sent/", ResetDoneView.as_view(), name="password_reset_done"),
    path("password-reset/<uidb64>/<token>/", ResetConfirmView.as_view(),
         name="password_reset_confirm"),
    path("password-reset/done/", ResetCompleteView.as_view(), name="password_reset_complete"),
]
