from django.apps import AppConfig


class AuditsConfig(AppConfig):
    name = "audits"
    verbose_name = "Offset rollback audits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import frames

        frames.register_frames()
