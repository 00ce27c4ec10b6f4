from django.urls import path

from . import views

app_name = "nameserver"

urlpatterns = [
    path("brokers/register", views.RegisterBrokerView.as_view(), name="register"),
    path("brokers/unregister", views.UnregisterBrokerView.as_view(), name="unregister"),
    path("brokers/heartbeat", views.HeartbeatView.as_view(), name="heartbeat"),
    path("brokers/member-group", views.MemberGroupView.as_view(), name="member-group"),
    path("brokers/<str:broker_name>/wipe-write-perm", views.WritePermView.as_view(writeable=False), name="wipe-write-perm"),
    path("brokers/<str:broker_name>/add-write-perm", views.WritePermView.as_view(writeable=True), name="add-write-perm"),
    path("cluster-info", views.ClusterInfoView.as_view(), name="cluster-info"),
    path("water-levels", views.WaterLevelsView.as_view(), name="water-levels"),
    path("routes/<str:topic>", views.TopicRouteView.as_view(), name="route"),
    path("topics", views.TopicListView.as_view(), name="topics"),
    path("topics/<str:topic>", views.TopicDetailView.as_view(), name="topic"),
    path("topics/<str:topic>/offsets", views.TopicOffsetsView.as_view(), name="topic-offsets"),
    path("brokers/status", views.BrokerStatusView.as_view(), name="broker-status"),
    path("consumer-groups", views.ConsumerGroupsView.as_view(), name="consumer-groups"),
    path("consumer-groups/<str:group>", views.ConsumerGroupView.as_view(), name="consumer-group"),
    path("config", views.ConfigView.as_view(), name="config"),
    path("static-topics", views.StaticTopicListView.as_view(), name="static-topics"),
    path("static-topics/<str:topic>", views.StaticTopicDetailView.as_view(), name="static-topic"),
    path("static-topics/<str:topic>/migrations", views.MigrationView.as_view(), name="static-topic-migrations"),
    path("static-topics/<str:topic>/queue-count", views.QueueCountView.as_view(), name="static-topic-queue-count"),
    path("topics/<str:topic>/make-static", views.AdoptView.as_view(), name="topic-make-static"),
]
