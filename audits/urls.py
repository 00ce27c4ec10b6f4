"""``api_urlpatterns`` under /api/v1/audits/, ``page_urlpatterns`` under /audits/ (controlplane/urls.py)."""

from django.urls import path

from . import views

api_urlpatterns = [
    path("offset-events", views.OffsetEventsView.as_view(), name="offset-events"),
    path("runs", views.RunsView.as_view(), name="runs"),
    path("runs/<int:run_id>", views.RunView.as_view(), name="run"),
    path("findings", views.FindingsView.as_view(), name="findings"),
]

page_urlpatterns = [
    path("", views.results, name="results"),
    path("run", views.run_now, name="run-now"),
]
