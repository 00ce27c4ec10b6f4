from django.apps import AppConfig


class ControllerConfig(AppConfig):
    """The controller (RocketMQ 5's DLedger controller, on Postgres): its own app, the nameserver's
    sibling. Its tables keep the names they had under the ``controlplane`` label (Meta.db_table)."""

    name = "controlplane.controller"
    label = "controller"
    verbose_name = "Controller"

    def ready(self) -> None:
        from . import frames  # the controller's frames on the broker websocket (controlplane.ws)

        frames.register_frames()
