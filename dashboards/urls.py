from django.urls import path, register_converter

from mqrules import validation

from . import action_views, messages_pages, views


class BrokerNameConverter:
    """A broker set's name as every API takes it (mqrules.validation): anything else in the path
    (NUL, a name too long) is no page (404) and never reaches Postgres."""

    regex = validation.NAME_PATTERN.removeprefix("^").removesuffix("+$") + f"{{1,{validation.NAME_MAX_LENGTH}}}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(BrokerNameConverter, "brokername")
register_converter(BrokerNameConverter, "topic")  # a topic or consumer group name: the same pattern

app_name = "dashboards"

urlpatterns = [
    # Pages (views.py)
    path("", views.overview, name="overview"),
    path("groups/<brokername:broker_name>/", views.group, name="group"),
    path("groups/<brokername:broker_name>/water-levels.json", views.water_levels, name="water-levels"),
    path("brokers/", views.brokers, name="brokers"),
    path("brokers/<brokername:broker_name>/<int:broker_id>/", views.broker, name="broker"),
    path("brokers/<brokername:broker_name>/<int:broker_id>/config", action_views.broker_config, name="broker-config"),
    path("consumers/", views.consumers, name="consumers"),
    path("consumers/<topic:group>/", views.consumer_group, name="consumer-group"),
    path("consumers/<topic:group>/progress.json", views.consumer_progress, name="consumer-progress"),
    path("consumers/<topic:group>/reset-offset", action_views.reset_offset, name="reset-offset"),
    path("topics/", views.topics, name="topics"),
    path("topics/update", action_views.update_topic, name="update-topic"),
    path("topics/<topic:topic>/", views.topic, name="topic"),
    path("topics/<topic:topic>/delete", action_views.delete_topic, name="delete-topic"),
    path("controller/", views.controller, name="controller"),
    path("static-topics/", views.static_topics, name="static-topics"),
    path("static-topics/<str:topic>/migrate", action_views.migrate_static_topic, name="migrate-static-topic"),
    path("static-topics/<str:topic>/change", action_views.change_static_topic, name="change-static-topic"),
    path("static-topics/make-static", action_views.make_static, name="make-static-topic"),
    path("config/", views.config, name="config"),
    path("audit/", views.audit, name="audit"),
    path("acl/", views.acl, name="acl"),
    # Messages, dead letters, clients (messages_pages.py; docs/messages.md)
    path("messages/", messages_pages.messages_page, name="messages"),
    path("messages/<brokername:cluster>/<str:msg_id>/", messages_pages.message_page, name="message"),
    path("dead-letters/", messages_pages.dead_letters_page, name="dead-letters"),
    path("dead-letters/<brokername:cluster>/<topic:group>/export", messages_pages.dead_letters_export, name="dlq-export"),
    path("dead-letters/<brokername:cluster>/<topic:group>/resend", messages_pages.dlq_resend, name="dlq-resend"),
    path("clients/", messages_pages.clients_page, name="clients"),
    # Operator actions (action_views.py): JSON, operators only, CSRF
    path("groups/<brokername:broker_name>/elect-preview", action_views.elect_preview, name="elect-preview"),
    path("groups/<brokername:broker_name>/elect", action_views.elect, name="elect"),
    path("groups/<brokername:broker_name>/isolate", action_views.isolate, name="isolate"),
    path("groups/<brokername:broker_name>/write-perm", action_views.write_perm, name="write-perm"),
    path("groups/<brokername:broker_name>/clean", action_views.clean, name="clean"),
    path("groups/<brokername:broker_name>/drill", action_views.drill_run, name="drill"),
    path("acl/<brokername:cluster>/create-user", action_views.acl_create_user, name="acl-create-user"),
    path("acl/<brokername:cluster>/update-user", action_views.acl_update_user, name="acl-update-user"),
    path("acl/<brokername:cluster>/delete-user", action_views.acl_delete_user, name="acl-delete-user"),
    path("acl/<brokername:cluster>/policy", action_views.acl_put_policy, name="acl-put-policy"),
    path("acl/<brokername:cluster>/delete-policy", action_views.acl_delete_policy, name="acl-delete-policy"),
]
