"""/api/v1/clusters/<cluster>/acl/: ACL 2.0 users and policies (nameserver/acl_views.py, docs/acl.md)."""

from django.urls import path

from . import acl_views

app_name = "acl"

urlpatterns = [
    path("<str:cluster>/acl/users", acl_views.UserListView.as_view(), name="users"),
    path("<str:cluster>/acl/users/<str:username>", acl_views.UserDetailView.as_view(), name="user"),
    path("<str:cluster>/acl/users/<str:username>/delete", acl_views.UserDeleteView.as_view(), name="user-delete"),
    path("<str:cluster>/acl/policies", acl_views.PolicyListView.as_view(), name="policies"),
    path("<str:cluster>/acl/policies/<str:username>", acl_views.PolicyDetailView.as_view(), name="policy"),
    path("<str:cluster>/acl/policies/<str:username>/delete", acl_views.PolicyDeleteView.as_view(), name="policy-delete"),
]
