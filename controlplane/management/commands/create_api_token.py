"""Issue an API token for a broker, a tool or a read-only client. The token is printed once, or, with
``--write-to``, only written to that file (mode 600) and never printed: a launcher's output ends up in
logs."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from controlplane.auth import write_secret
from controlplane.models import ApiToken, TokenScope


class Command(BaseCommand):
    help = "Create an API token (scopes: broker, admin, read). Only its hash is stored."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--scope", required=True, choices=[s.value for s in TokenScope])
        parser.add_argument("--cluster", default="", help="restrict a broker token to one cluster")
        parser.add_argument("--if-missing", action="store_true", help="do nothing if a token of this name exists")
        parser.add_argument("--write-to", help="write the token to this file (mode 600) instead of printing it")

    def handle(self, *args, **opts):
        if ApiToken.objects.filter(name=opts["name"]).exists():
            if opts["if_missing"]:
                self.stdout.write(f"token {opts['name']!r} already exists (not shown again)")
                return
            raise CommandError(f"a token named {opts['name']!r} exists; revoke it or pick another name")
        _, raw = ApiToken.issue(opts["name"], opts["scope"], opts["cluster"])
        if not opts["write_to"]:
            self.stdout.write(raw)
            return
        path = Path(opts["write_to"])
        write_secret(path, raw)
        self.stdout.write(f"token {opts['name']!r} written to {path}")
