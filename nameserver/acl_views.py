"""ACL 2.0 users and policies over REST (/api/v1/clusters/<cluster>/acl/; docs/acl.md): mqadmin's
createUser, updateUser, deleteUser, listUser, createAcl, updateAcl, deleteAcl, listAcl. Thin: check,
call nameserver/acl.py, shape. Reads: any token or login; changes: an operator. A token bound to a
cluster reaches that cluster only. The services record their own audit row (without secrets) in the
change's transaction, so the audit middleware leaves these views alone (``self_audited``)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, path_cluster, who
from controlplane.errors import ApiError
from controlplane.openapi import AUTH, BODY, errors
from controlplane.validation_drf import checked_param, name_parameter, validated
from mqrules import acl as rules
from mqrules.codes import ResponseCode

from . import acl, acl_selectors
from .acl_serializers import (
    AclCreateSerializer,
    AclDeleteSerializer,
    AclListQuerySerializer,
    AclUpdateSerializer,
    DeletedAnswer,
    DryRunSerializer,
    PolicyAnswer,
    PolicyChangeAnswer,
    PolicyListAnswer,
    UserAnswer,
    UserChangeAnswer,
    UserCreateSerializer,
    UserListAnswer,
    UserListQuerySerializer,
    UserUpdateSerializer,
)

CLUSTER = name_parameter("cluster", OpenApiParameter.PATH, description="the cluster the users and policies are of")
USERNAME = name_parameter("username", OpenApiParameter.PATH)
NO_USER = "The user does not exist: 3001 USER_NOT_EXIST."
NO_KEYS = "No key to encrypt secret keys with (RMQHA_ACL_KEYS unset): 1 SYSTEM_ERROR, nothing changed."
PREVIEW = (
    " dryRun: the same checks and the lockouts preview, nothing changed. Every change answers `lockouts`: what "
    "a user could do (Pub/Sub on the cluster's known topics, Sub on its groups) before and could not after."
)


def _refused(exc: acl.AclRefused) -> ApiError:
    extra = {"fields": exc.fields} if exc.fields else {}
    return ApiError(exc.code, exc.detail, exc.http_status, **extra)


def _run(shows: str | None, change, *args, **kw) -> Response:
    try:
        return Response(change(*args, **kw).answer((shows,) if shows else ()))
    except acl.AclRefused as exc:
        raise _refused(exc) from None


class _AclView(APIView):
    self_audited = True  # nameserver/acl.py records each change in its transaction, secrets left out

    def get_permissions(self):
        return super().get_permissions() if self.request.method == "GET" else [IsAdmin()]


class UserListView(_AclView):
    @extend_schema(
        operation_id="listUser",
        parameters=[CLUSTER, UserListQuerySerializer],
        responses={200: UserListAnswer, **errors(400, *AUTH)},
        description="mqadmin listUser: the cluster's users (never their secret keys).",
    )
    def get(self, request, cluster: str):
        path_cluster(request, cluster)
        q = validated(UserListQuerySerializer, request.query_params.dict())
        rows = acl_selectors.users(cluster, q["filter"])
        return Response({"version": acl_selectors.version(cluster), "users": [acl_selectors.user_dict(r) for r in rows]})

    @extend_schema(
        operation_id="createUser",
        parameters=[CLUSTER],
        request=UserCreateSerializer,
        responses={
            200: UserChangeAnswer,
            **errors(*BODY, why={409: "The user exists: 29 INVALID_PARAMETER.", 503: NO_KEYS}),
        },
        description="mqadmin createUser: username is the access key, password the secret key (absent: one is "
        "generated); the answer shows it once, it is stored encrypted and never shown again." + PREVIEW,
    )
    def post(self, request, cluster: str):
        path_cluster(request, cluster)
        d = validated(UserCreateSerializer, request.data)
        return _run(
            "user",
            acl.create_user,
            cluster,
            d["username"],
            d.get("password"),
            rules.UserType(d["userType"]),
            rules.UserStatus(d["userStatus"]),
            actor=who(request),
            dry_run=d["dryRun"],
        )


class UserDetailView(_AclView):
    @extend_schema(
        operation_id="getUser",
        parameters=[CLUSTER, USERNAME],
        responses={200: UserAnswer, **errors(400, *AUTH, why={404: NO_USER})},
    )
    def get(self, request, cluster: str, username: str):
        path_cluster(request, cluster)
        checked_param("username", username)
        row = acl_selectors.user_row(cluster, username)
        if row is None:
            raise _refused(
                acl.AclRefused(ResponseCode.USER_NOT_EXIST, f"user {username} does not exist in cluster {cluster}", 404)
            )
        return Response(acl_selectors.user_dict(row))

    @extend_schema(
        operation_id="updateUser",
        parameters=[CLUSTER, USERNAME],
        request=UserUpdateSerializer,
        responses={200: UserChangeAnswer, **errors(*BODY, why={404: NO_USER, 503: NO_KEYS})},
        description="mqadmin updateUser: a new secret key (password), type or status; what is not given stays." + PREVIEW,
    )
    def patch(self, request, cluster: str, username: str):
        path_cluster(request, cluster)
        checked_param("username", username)
        d = validated(UserUpdateSerializer, request.data)
        return _run(
            "user",
            acl.update_user,
            cluster,
            username,
            password=d.get("password"),
            user_type=rules.UserType(d["userType"]) if "userType" in d else None,
            user_status=rules.UserStatus(d["userStatus"]) if "userStatus" in d else None,
            actor=who(request),
            dry_run=d["dryRun"],
        )


class UserDeleteView(_AclView):
    @extend_schema(
        operation_id="deleteUser",
        parameters=[CLUSTER, USERNAME],
        request=DryRunSerializer,
        responses={200: DeletedAnswer, **errors(*BODY, why={404: NO_USER})},
        description="mqadmin deleteUser: the user and its policy." + PREVIEW,
    )
    def post(self, request, cluster: str, username: str):
        path_cluster(request, cluster)
        checked_param("username", username)
        d = validated(DryRunSerializer, request.data)
        return _run(None, acl.delete_user, cluster, username, actor=who(request), dry_run=d["dryRun"])


class PolicyListView(_AclView):
    @extend_schema(
        operation_id="listAcl",
        parameters=[CLUSTER, AclListQuerySerializer],
        responses={200: PolicyListAnswer, **errors(400, *AUTH)},
        description="mqadmin listAcl: the policies whose subject contains `subject`, with their entries whose "
        "resource contains `resource`.",
    )
    def get(self, request, cluster: str):
        path_cluster(request, cluster)
        q = validated(AclListQuerySerializer, request.query_params.dict())
        found = acl_selectors.policies(cluster, q["subject"], q["resource"])
        return Response({"version": acl_selectors.version(cluster), "policies": found})

    @extend_schema(
        operation_id="createAcl",
        parameters=[CLUSTER],
        request=AclCreateSerializer,
        responses={200: PolicyChangeAnswer, **errors(*BODY, why={404: NO_USER})},
        description="mqadmin createAcl: the subject's policy, made or merged into (an entry replaces the one of "
        f"the same resource); one entry per resource, at most {rules.MAX_ENTRIES}. Malformed entries: 400 with a "
        "problem per field (`entries[0].actions`), nothing taken." + PREVIEW,
    )
    def post(self, request, cluster: str):
        path_cluster(request, cluster)
        d = validated(AclCreateSerializer, request.data)
        return _run("policy", acl.create_acl, cluster, d["subject"], d["entries"], actor=who(request), dry_run=d["dryRun"])


class PolicyDetailView(_AclView):
    @extend_schema(
        operation_id="getAcl",
        parameters=[CLUSTER, USERNAME],
        responses={200: PolicyAnswer, **errors(400, *AUTH, why={404: "No policy: 3002 POLICY_NOT_EXIST."})},
    )
    def get(self, request, cluster: str, username: str):
        path_cluster(request, cluster)
        checked_param("username", username)
        found = [p for p in acl_selectors.policies(cluster, username) if p["username"] == username]
        if not found:
            raise _refused(acl.AclRefused(ResponseCode.POLICY_NOT_EXIST, f"{username} has no policy in cluster {cluster}", 404))
        return Response(found[0])

    @extend_schema(
        operation_id="updateAcl",
        parameters=[CLUSTER, USERNAME],
        request=AclUpdateSerializer,
        responses={
            200: PolicyChangeAnswer,
            **errors(*BODY, why={404: NO_USER + " Or no policy yet: 3002 POLICY_NOT_EXIST."}),
        },
        description="mqadmin updateAcl: entries of an existing policy replaced (same resource) or added." + PREVIEW,
    )
    def patch(self, request, cluster: str, username: str):
        path_cluster(request, cluster)
        checked_param("username", username)
        d = validated(AclUpdateSerializer, request.data)
        return _run("policy", acl.update_acl, cluster, username, d["entries"], actor=who(request), dry_run=d["dryRun"])


class PolicyDeleteView(_AclView):
    @extend_schema(
        operation_id="deleteAcl",
        parameters=[CLUSTER, USERNAME],
        request=AclDeleteSerializer,
        responses={
            200: PolicyChangeAnswer,
            **errors(*BODY, why={404: NO_USER + " Or no policy, or no entry for a resource: 3002 POLICY_NOT_EXIST."}),
        },
        description="mqadmin deleteAcl: the whole policy, or (resources) those resources' entries." + PREVIEW,
    )
    def post(self, request, cluster: str, username: str):
        path_cluster(request, cluster)
        checked_param("username", username)
        d = validated(AclDeleteSerializer, request.data)
        resources = [rules.Resource.parse(r) for r in d.get("resources", [])]
        return _run("policy", acl.delete_acl, cluster, username, resources, actor=who(request), dry_run=d["dryRun"])
