from django.urls import path

from . import admin_views, metrics, views

app_name = "operations"

urlpatterns = [
    path("brokers/isolate", views.IsolateView.as_view(), name="isolate"),
    path("brokers/unisolate", views.UnisolateView.as_view(), name="unisolate"),
    path("brokers/config", admin_views.BrokerConfigView.as_view(), name="broker-config"),
    path("consumer-groups/<str:group>/reset-offset", admin_views.ResetOffsetView.as_view(), name="reset-offset"),
    path("groups/<str:broker_name>/headroom", views.HeadroomView.as_view(), name="headroom"),
    path("groups/<str:broker_name>/drill", views.DrillView.as_view(), name="drill"),
    path("drills", views.DrillsView.as_view(), name="drills"),
    path("metrics/targets", metrics.TargetsView.as_view(), name="metrics-targets"),
]
