"""``manage.py bootstrap_operator``: make sure the demo/first-install operator account exists.

Why a command rather than a data migration: the password must be random per installation and shown
to a human exactly once, which a migration (also run by tests and CI) must not do. Idempotent, so the
launcher calls it on every ``make demo``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

USERNAME = "operator"


def password_file() -> Path:
    """Where the generated password is kept (the launcher's data folder, gitignored)."""
    data_dir = getattr(settings, "DATA_DIR", None) or Path(settings.BASE_DIR) / ".data"
    return Path(data_dir) / "operator-password"


def write_secret(path: Path, secret: str) -> None:
    """Write ``secret`` readable by the owner only; the mode is set at creation, never world-readable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    path.chmod(0o600)  # an older file may have had another mode


class Command(BaseCommand):
    help = (
        f"Create the '{USERNAME}' account with a random password (printed once and saved to "
        ".data/operator-password) unless it already exists."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        lookup = {user_model.USERNAME_FIELD: USERNAME}
        with transaction.atomic():
            if user_model._default_manager.filter(**lookup).exists():
                self.stdout.write(
                    f"Account '{USERNAME}' already exists; its password is not shown again. "
                    f"To reset it: python manage.py changepassword {USERNAME}"
                )
                return
            password = secrets.token_urlsafe(15)
            # Superuser for now: dedicated operator permissions arrive with the RBAC issue.
            user_model._default_manager.create_superuser(**({"email": ""} | lookup), password=password)
        path = password_file()
        write_secret(path, password)
        self.stdout.write(
            self.style.SUCCESS(f"Created account '{USERNAME}' with password: {password}")
            + f"\n(shown only this once; also saved to {path}, mode 600)"
        )
