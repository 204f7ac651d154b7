"""Test settings: the project's settings under a throwaway environment (see tests/conftest.py)."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdef")
os.environ.setdefault("GORGE_BEHIND_TLS_PROXY", "false")
os.environ.setdefault("DATABASE_URL", "sqlite://:memory:")
os.environ.setdefault("GORGE_WEBHOOK_DATABASE_URL", f"mysql://root@127.0.0.1:3306/gwtest{os.getpid()}_herald")
os.environ.setdefault("GORGE_WEBHOOK_OUTBOUND_BLACKLIST", "")

from gorge_site.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Tests render pages straight from the apps' static directories, without collectstatic.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
STATIC_ROOT = None  # type: ignore[assignment]
