"""Check the controller's transition history; exit 1 and list the violations if any."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.controller.invariants import check_history
from controlplane.controller.models import Transition


class Command(BaseCommand):
    help = "Check the controller history: one master per epoch, monotone epochs, no stale alter, master in set."

    def add_arguments(self, parser):
        parser.add_argument("broker_names", nargs="*", help="only these broker sets (default: all)")

    def handle(self, *args, **opts):
        names = opts["broker_names"] or None
        violations = check_history(names)
        count = Transition.objects.filter(**({"broker_name__in": names} if names else {})).count()
        for v in violations:
            self.stderr.write(str(v))
        if violations:
            raise CommandError(f"{len(violations)} violation(s) in {count} transitions")
        self.stdout.write(f"ok: {count} transitions, no violation")
