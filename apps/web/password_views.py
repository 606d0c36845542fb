"""Password reset by e-mail through Django's own views (``EMAIL_BACKEND``: the console in
development, ``LASER_EMAIL_BACKEND`` in production), with the web app's templates.

Requests are counted in the cache for an hour: past ``RESETS_PER_HOUR`` from one address the
form answers 429; past it for one e-mail address no more mail is sent, while the page still
says "check your e-mail" (it never tells whether an account has that address)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse_lazy

RESETS_PER_HOUR = 5


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

    def form_valid(self, form: Any) -> HttpResponse:
        address = self.request.META.get("REMOTE_ADDR", "")
        if _spent(f"web:reset:addr:{address}"):
            refused = render(self.request, "web/registration/password_reset_form.html",
                             {"form": form, "throttled": True}, status=429)
            refused["Retry-After"] = "3600"
            return refused
        if _spent(f"web:reset:email:{form.cleaned_data['email'].lower()}"):
            return HttpResponseRedirect(self.get_success_url())
        return super().form_valid(form)


def _spent(key: str) -> bool:
    """Count one more request under ``key`` (an hour's window); whether it is past the limit."""
    cache.add(key, 0, timeout=3600)
    try:
        return cache.incr(key) > RESETS_PER_HOUR
    except ValueError:  # expired between add and incr: a fresh window
        cache.set(key, 1, timeout=3600)
        return False


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
