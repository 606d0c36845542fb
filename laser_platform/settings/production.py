"""Production profile (``LASER_ENV=production``): the base profile with deploy checks satisfied.

``python manage.py check --deploy --fail-level WARNING`` passes with this profile. It refuses
to start without a real ``SECRET_KEY`` and an explicit ``ALLOWED_HOSTS``.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from laser_platform.settings._env import env, env_required
from laser_platform.settings.base import *  # noqa: F403

SECRET_KEY = env_required("SECRET_KEY")
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure"):
    raise ImproperlyConfigured("SECRET_KEY must be a random string of at least 50 characters")
LASER_API_KEY_PEPPER = env("LASER_API_KEY_PEPPER", "") or SECRET_KEY
DEBUG = False
ALLOWED_HOSTS = env_required("ALLOWED_HOSTS", list)

# TLS usually ends at a proxy in front of the web processes; trust its header only when told.
if env("LASER_BEHIND_PROXY", True, bool):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env("SECURE_SSL_REDIRECT", True, bool)
# Load balancers probe over plain HTTP; a redirect would read as "down".
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^ready$"]
SECURE_HSTS_SECONDS = env("SECURE_HSTS_SECONDS", 31_536_000, int)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env("SECURE_HSTS_INCLUDE_SUBDOMAINS", True, bool)
SECURE_HSTS_PRELOAD = env("SECURE_HSTS_PRELOAD", True, bool)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
