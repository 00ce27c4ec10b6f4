from django.apps import AppConfig


class NameserverConfig(AppConfig):
    name = "nameserver"
    verbose_name = "Nameserver"

    def ready(self) -> None:
        from controlplane.auth import register_broker_set_reader

        from . import frames
        from .selectors import broker_set_clusters

        frames.register_frames()
        register_broker_set_reader(broker_set_clusters)  # where a token's cluster binding looks sets up
