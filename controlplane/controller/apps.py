from django.apps import AppConfig


class ControllerConfig(AppConfig):
    """The controller (RocketMQ 5's DLedger controller, on Postgres): its own app, the nameserver's
    sibling. Its tables keep the names they had under the ``controlplane`` label (Meta.db_table)."""

    name = "controlplane.controller"
    label = "controller"
    verbose_name = "Controller"

    def ready(self) -> None:
        from controlplane.auth import register_broker_set_reader

        from . import frames  # the controller's frames on the broker websocket (controlplane.ws)
        from .selectors import broker_set_clusters

        frames.register_frames()
        register_broker_set_reader(broker_set_clusters)  # where a token's cluster binding looks sets up
