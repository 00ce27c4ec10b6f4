"""Who is an operator has one definition (controlplane.auth.is_operator): an admin token, a superuser,
or a member of the "operators" group. REST (IsAdmin, the controller's designated election), the
dashboard and the audits page all ask it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group, User
from rest_framework.test import APIRequestFactory

import audits.views
import controlplane.controller.views
import dashboards.action_views
import dashboards.views
from controlplane import auth
from controlplane.models import TokenScope

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _user(kind: str):
    if kind == "anonymous":
        return AnonymousUser()
    if kind == "superuser":
        return User.objects.create_superuser("root", password="x" * 12)
    user = User.objects.create_user(kind, password="x" * 12, is_staff=kind == "staff, not in the group")
    if kind == "in the operators group":
        user.groups.add(Group.objects.get_or_create(name=auth.OPERATORS_GROUP)[0])
    return user


WHO = {
    "admin token": (auth.TokenPrincipal("t", TokenScope.ADMIN), True),
    "broker token": (auth.TokenPrincipal("t", TokenScope.BROKER), False),
    "read token": (auth.TokenPrincipal("t", TokenScope.READ), False),
    "superuser": ("superuser", True),
    "member of the operators group": ("in the operators group", True),
    "staff, not in the group": ("staff, not in the group", False),
    "a logged-in viewer": ("viewer", False),
    "anonymous": ("anonymous", False),
}


@pytest.mark.parametrize("principal, operator", WHO.values(), ids=WHO.keys())
def test_who_is_an_operator_the_same_for_rest_the_dashboard_and_the_audits_page(principal, operator):
    principal = _user(principal) if isinstance(principal, str) else principal
    assert auth.is_operator(principal) is operator
    request = APIRequestFactory().post("/")
    request.user, request.auth = principal, principal if isinstance(principal, auth.TokenPrincipal) else None
    assert auth.request_is_operator(request) is operator
    assert auth.IsAdmin().has_permission(request, None) is operator


def test_every_edge_asks_the_one_definition():
    assert dashboards.views.is_operator is auth.is_operator
    assert dashboards.action_views.is_operator is auth.is_operator
    assert audits.views.is_operator is auth.is_operator
    assert controlplane.controller.views.request_is_operator is auth.request_is_operator
    assert audits.views.who is auth.who
    assert audits.views.caller_of is controlplane.controller.views.caller_of is auth.caller_of  # who, with the binding
