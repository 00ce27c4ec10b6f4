from django.apps import AppConfig


class OperationsConfig(AppConfig):
    """Floor 3 as an app, for its management commands: ``serve_remoting`` serves the nameserver's
    remoting endpoint with the embedded controller's handlers, which only a floor above both siblings
    may bring together (ARCHITECTURE.md §2). No models."""

    name = "controlplane.operations"
    label = "operations"
    verbose_name = "Operations"
