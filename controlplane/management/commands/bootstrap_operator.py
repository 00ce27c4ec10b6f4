"""``manage.py bootstrap_operator``: make sure the demo/first-install operator account exists.

Why a command rather than a data migration: the password must be random per installation and kept
in a file for a human (never printed: the launcher's output ends up in logs), which a migration
(also run by tests and CI) must not do. Idempotent, so the
launcher calls it on every ``make demo``.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from controlplane.auth import write_secret

USERNAME = "operator"


def password_file() -> Path:
    """Where the generated password is kept (the launcher's data folder, gitignored)."""
    data_dir = getattr(settings, "DATA_DIR", None) or Path(settings.BASE_DIR) / ".data"
    return Path(data_dir) / "operator-password"


class Command(BaseCommand):
    help = (
        f"Create the '{USERNAME}' account with a random password, saved to .data/operator-password "
        "(mode 600, never printed: a launcher's output ends up in logs), unless it already exists."
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
        self.stdout.write(self.style.SUCCESS(f"Created account '{USERNAME}'; its password is in {path} (mode 600)"))
