from django.urls import path, register_converter

from controlplane import validation

from . import action_views, views


class BrokerNameConverter:
    """A broker set's name as every API takes it (controlplane.validation): anything else in the path
    (NUL, a name too long) is no page (404) and never reaches Postgres."""

    regex = validation.NAME_PATTERN.removeprefix("^").removesuffix("+$") + f"{{1,{validation.NAME_MAX_LENGTH}}}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(BrokerNameConverter, "brokername")

app_name = "dashboards"

urlpatterns = [
    # Pages (views.py)
    path("", views.overview, name="overview"),
    path("groups/<brokername:broker_name>/", views.group, name="group"),
    path("groups/<brokername:broker_name>/water-levels.json", views.water_levels, name="water-levels"),
    path("brokers/", views.brokers, name="brokers"),
    path("topics/", views.topics, name="topics"),
    path("static-topics/", views.static_topics, name="static-topics"),
    path("static-topics/<str:topic>/migrate", action_views.migrate_static_topic, name="migrate-static-topic"),
    path("config/", views.config, name="config"),
    path("audit/", views.audit, name="audit"),
    # Operator actions (action_views.py): JSON, operators only, CSRF
    path("groups/<brokername:broker_name>/elect-preview", action_views.elect_preview, name="elect-preview"),
    path("groups/<brokername:broker_name>/elect", action_views.elect, name="elect"),
    path("groups/<brokername:broker_name>/isolate", action_views.isolate, name="isolate"),
    path("groups/<brokername:broker_name>/write-perm", action_views.write_perm, name="write-perm"),
]
