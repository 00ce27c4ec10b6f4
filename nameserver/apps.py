from django.apps import AppConfig


class NameserverConfig(AppConfig):
    name = "nameserver"
    verbose_name = "Nameserver"

    def ready(self) -> None:
        from . import frames

        frames.register_frames()
