"""Default settings profile: development and the embedded single-process mode.

Every value that differs between deployments comes from the environment through ``env``;
the README lists each variable. ``production.py`` tightens this profile.
"""

from __future__ import annotations

from datetime import timedelta

from laser_platform.settings._env import BASE_DIR, VAR_DIR, env, proxy_list  # noqa: F401
from laser_platform.settings.celery import *  # noqa: F403
from laser_platform.settings.channels import *  # noqa: F403
from laser_platform.settings.database import *  # noqa: F403
from laser_platform.settings.gateway import *  # noqa: F403
from laser_platform.settings.inference import *  # noqa: F403
from laser_platform.settings.openapi import *  # noqa: F403
from laser_platform.settings.slo import *  # noqa: F403

# A fixed key is fine for a laptop; production.py refuses to start without a real one.
SECRET_KEY: str = env("SECRET_KEY", "django-insecure-laser-development-key-do-not-use-in-prod")
# API key hashes are keyed with this; set it explicitly to rotate SECRET_KEY without
# invalidating every issued API key.
LASER_API_KEY_PEPPER: str = env("LASER_API_KEY_PEPPER", "") or SECRET_KEY
DEBUG: bool = env("DEBUG", False, bool)
ALLOWED_HOSTS: list[str] = env("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"], list)
CSRF_TRUSTED_ORIGINS: list[str] = env("CSRF_TRUSTED_ORIGINS", [], list)

DJANGO_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
]
THIRD_PARTY_APPS = ["rest_framework", "channels", "axes", "drf_spectacular"]
# Laser's own apps, in dependency order. Add a new app here (one line each).
LASER_APPS = [
    "apps.core",
    "apps.tenants",
    "apps.gateway",
    "apps.slo",
    "apps.batches",
    "apps.web",
]
LOGIN_URL = "/login/"
# Password-reset mail (and breach alerts): printed to the console unless a backend is named,
# e.g. django.core.mail.backends.smtp.EmailBackend with Django's EMAIL_HOST settings.
EMAIL_BACKEND: str = env("LASER_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL: str = env("LASER_FROM_EMAIL", "laser@localhost")
INSTALLED_APPS = DJANGO_APPS + THIRD_PARTY_APPS + LASER_APPS

MIDDLEWARE = [
    # First: every request gets an id, every 500 is logged with its traceback and that id.
    "apps.core.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns django-axes' lockout into the response of any login view.
    "axes.middleware.AxesMiddleware",
]

# Client addresses: uvicorn (manage.py serve) takes X-Forwarded-For / X-Forwarded-Proto only on
# connections from these proxies (addresses or networks, "*" for any); none by default, so
# REMOTE_ADDR is the connection's. Set it to the reverse proxy's address behind one (README).
LASER_TRUSTED_PROXIES: list[str] = env("LASER_TRUSTED_PROXIES", [], proxy_list)

# Login throttling for every login (admin, dashboard): apps/tenants/lockout.py. django-axes
# locks one (username, address) pair after LASER_LOGIN_FAILURE_LIMIT failures for
# LASER_LOGIN_LOCKOUT_MINUTES (429, a page saying so); per user, at most
# LASER_LOGIN_USER_FAILURE_LIMIT failures per LASER_LOGIN_USER_WINDOW_S from addresses the user
# never signed in from, then such logins wait for the window's end (429 + Retry-After). Staff
# unlock a pair early in the admin ("Axes" > "Access attempts") or with
# `manage.py axes_reset_username USERNAME`. The address is REMOTE_ADDR only.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT: int = env("LASER_LOGIN_FAILURE_LIMIT", 5, int)
AXES_COOLOFF_TIME = timedelta(minutes=env("LASER_LOGIN_LOCKOUT_MINUTES", 60.0, float))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "core/login_locked.html"
AXES_HANDLER = "apps.tenants.lockout.LoginHandler"
AXES_CLIENT_IP_CALLABLE = "apps.tenants.lockout.client_address"
AXES_LOCKOUT_CALLABLE = "apps.tenants.lockout.lockout_response"
LASER_LOGIN_USER_FAILURE_LIMIT: int = env("LASER_LOGIN_USER_FAILURE_LIMIT", 10, int)
LASER_LOGIN_USER_WINDOW_S: int = env("LASER_LOGIN_USER_WINDOW_S", 900, int)

ROOT_URLCONF = "laser_platform.urls"
ASGI_APPLICATION = "laser_platform.asgi.application"
APPEND_SLASH = False  # OpenAI clients POST to exact paths; a redirect would drop the body.

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["apps.tenants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "apps.core.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# Process model. LASER_EMBEDDED is switched on by `manage.py serve` (see manage.py) so that
# tests and other management commands never start the engine or a worker thread.
LASER_EMBEDDED: bool = env("LASER_EMBEDDED", False, bool)
LASER_DRAIN_TIMEOUT: float = env("LASER_DRAIN_TIMEOUT", 30.0, float)
# While draining, the listener stays open this long: late requests get 503 (retry elsewhere).
LASER_DRAIN_ACCEPT_S: float = env("LASER_DRAIN_ACCEPT_S", 2.0, float)
# last_used_at is written at most this often per key, not on every request.
LASER_API_KEY_TOUCH_INTERVAL: int = env("LASER_API_KEY_TOUCH_INTERVAL", 60, int)
# Deepest JSON accepted in a request body or a batch input line (apps/core/jsonbody.py).
LASER_MAX_JSON_DEPTH: int = env("LASER_MAX_JSON_DEPTH", 64, int)

LOG_LEVEL: str = env(
    "LOG_LEVEL", "INFO", str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Each record names the request it was logged for ("-" outside one): apps/core/request_id.py
    "filters": {"request_id": {"()": "apps.core.request_id.RequestIdFilter"}},
    "formatters": {"plain": {
        "format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["request_id"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

# Last, because it overrides Celery values above (visibility timeout vs. task length).
from laser_platform.settings.batches import *  # noqa: E402, F403
