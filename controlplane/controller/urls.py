from django.urls import path

from . import views

app_name = "controller"

urlpatterns = [
    path("brokers/apply-broker-id", views.ApplyBrokerIdView.as_view(), name="apply-broker-id"),
    path("brokers/register", views.RegisterView.as_view(), name="register"),
    path("brokers/heartbeat", views.HeartbeatView.as_view(), name="heartbeat"),
    path("groups/<str:broker_name>/next-broker-id", views.NextBrokerIdView.as_view(), name="next-broker-id"),
    path("groups/<str:broker_name>/replica-info", views.ReplicaInfoView.as_view(), name="replica-info"),
    path("elect-master", views.ElectView.as_view(), name="elect-master"),
    path("alter-sync-state-set", views.AlterView.as_view(), name="alter-sync-state-set"),
    path("clean-broker-data", views.CleanView.as_view(), name="clean-broker-data"),
    path("sync-state-data", views.SyncStateDataView.as_view(), name="sync-state-data"),
    path("metadata", views.MetadataView.as_view(), name="metadata"),
    path("history", views.HistoryView.as_view(), name="history"),
    path("config", views.ConfigView.as_view(), name="config"),
]
