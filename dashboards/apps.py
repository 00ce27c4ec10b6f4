from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "dashboards"
    verbose_name = "Dashboards"

    def ready(self) -> None:
        # The controller announces, the dashboard listens (ARCHITECTURE.md §2: a lower floor never calls up).
        from controlplane.controller.signals import replica_group_changed

        from . import live

        replica_group_changed.connect(live.on_replica_group_changed, dispatch_uid="dashboards.live.state")
        from nameserver.signals import water_levels_reported

        from . import water_feed

        water_levels_reported.connect(water_feed.on_water_levels_reported, dispatch_uid="dashboards.water_levels")
