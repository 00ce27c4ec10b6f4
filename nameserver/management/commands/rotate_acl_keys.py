"""Re-encrypt every ACL user's secret key with the first key of RMQHA_ACL_KEYS (docs/acl.md, "Key
rotation"): put the new key first, keep the old ones after it, run this, then drop the old keys. The
secrets themselves do not change, so no client or broker notices."""

from django.core.management.base import BaseCommand, CommandError

from controlplane import secretbox
from nameserver import acl


class Command(BaseCommand):
    help = "Re-encrypt every ACL secret key with the first key of RMQHA_ACL_KEYS (key rotation)."

    def handle(self, *args, **opts):
        try:
            done = acl.rotate_keys()
        except secretbox.SecretsUnavailable as exc:
            raise CommandError(f"{exc}; nothing past that secret was re-encrypted") from None
        self.stdout.write(f"re-encrypted {done} secret key(s) with the first key of {secretbox.KEYS_ENV}")
