from django.urls import path

from . import action_views, views

app_name = "dashboards"

urlpatterns = [
    # Pages (views.py)
    path("", views.overview, name="overview"),
    path("groups/<str:broker_name>/", views.group, name="group"),
    path("groups/<str:broker_name>/water-levels.json", views.water_levels, name="water-levels"),
    path("brokers/", views.brokers, name="brokers"),
    path("topics/", views.topics, name="topics"),
    path("config/", views.config, name="config"),
    path("audit/", views.audit, name="audit"),
    # Operator actions (action_views.py): JSON, operators only, CSRF
    path("groups/<str:broker_name>/elect-preview", action_views.elect_preview, name="elect-preview"),
    path("groups/<str:broker_name>/elect", action_views.elect, name="elect"),
    path("groups/<str:broker_name>/isolate", action_views.isolate, name="isolate"),
    path("groups/<str:broker_name>/write-perm", action_views.write_perm, name="write-perm"),
]
