from django.apps import AppConfig


class ControlplaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Control plane"

    def ready(self) -> None:
        from . import broker_rpc, throttling

        throttling.check_rates()  # a bad RMQHA_THROTTLE_* stops the process with one line
        broker_rpc.register_frames()  # brokers' answers to requests (controlplane/broker_rpc.py)
