"""/api/v1/clusters/<cluster>/: messages, their traces, dead letters and connected clients
(controlplane/operations/messages_views.py; docs/messages.md §5)."""

from django.urls import path

from . import messages_views as views

app_name = "messages"

urlpatterns = [
    path("<str:cluster>/messages", views.MessagesView.as_view(), name="messages"),
    path("<str:cluster>/messages/by-offset", views.ByOffsetView.as_view(), name="by-offset"),
    path("<str:cluster>/messages/<str:msg_id>", views.MessageView.as_view(), name="message"),
    path("<str:cluster>/messages/<str:msg_id>/body", views.BodyView.as_view(), name="body"),
    path("<str:cluster>/messages/<str:msg_id>/trace", views.TraceView.as_view(), name="trace"),
    path("<str:cluster>/dlq/<str:group>", views.DeadLettersView.as_view(), name="dlq"),
    path("<str:cluster>/dlq/<str:group>/resend", views.ResendView.as_view(), name="resend"),
    path("<str:cluster>/dlq/<str:group>/export", views.ExportView.as_view(), name="export"),
    path("<str:cluster>/clients", views.ClientsView.as_view(), name="clients"),
]
