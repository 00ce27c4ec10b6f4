from django.urls import path

from . import views

app_name = "operations"

urlpatterns = [
    path("brokers/isolate", views.IsolateView.as_view(), name="isolate"),
    path("brokers/unisolate", views.UnisolateView.as_view(), name="unisolate"),
]
