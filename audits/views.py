"""REST endpoints (/api/v1/audits/) and the results page (/audits/): thin, each calls one service or
selector. Tokens: broker (or admin) to report events, admin (or an operator login) to start a run, any
token or a login to read. The page's "Run audit now" needs an operator login and CSRF."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import HasReadAccess, IsAdmin, IsBroker, TokenPrincipal, is_operator, who
from controlplane.errors import ApiError, ResponseCode
from spark_jobs.schema import Cause

from . import selectors, services
from .events import OFFSET_EVENTS_SCHEMA, parse_offset_events
from .models import FindingKind, RunTrigger
from .serializers import AuditRunSerializer, FindingSerializer, replica_group_history_url, replica_group_url

PAGE_FINDINGS = 500


# --- REST ---------------------------------------------------------------------------------------


class OffsetEventsView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="reportOffsetEvents",
        request={"application/json": OFFSET_EVENTS_SCHEMA},
        responses={202: OpenApiTypes.OBJECT},
        description="A broker's batch of consumer-offset commits for the event store (docs/audits.md). "
        "400 + 29 with field errors; 429 + 2 when the buffer is full.",
    )
    def post(self, request):
        batch = parse_offset_events(request.data)
        if not request.auth.allows_cluster(batch.cluster_name):
            raise ApiError(
                ResponseCode.NO_PERMISSION, f"this token may not act on cluster {batch.cluster_name}", status.HTTP_403_FORBIDDEN
            )
        return Response({"accepted": services.report_offset_events(batch)}, status=status.HTTP_202_ACCEPTED)


class _ListQuery(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=20)


class RunsView(APIView):
    def get_permissions(self):
        return [IsAdmin()] if self.request.method == "POST" else [HasReadAccess()]

    @extend_schema(
        operation_id="listAuditRuns", parameters=[OpenApiParameter("limit", int)], responses={200: OpenApiTypes.OBJECT}
    )
    def get(self, request):
        query = _ListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        active = selectors.active_run()
        return Response(
            {
                "runs": AuditRunSerializer(selectors.runs(query.validated_data["limit"]), many=True).data,
                "activeRunId": active.pk if active else None,
            }
        )

    @extend_schema(
        operation_id="startAuditRun",
        request=None,
        responses={202: AuditRunSerializer},
        description="Queue an offset-rollback audit (admin). 409 + 2 with the active run when one is "
        "queued or running. Written to the operator audit log.",
    )
    def post(self, request):
        trigger = RunTrigger.API if isinstance(request.auth, TokenPrincipal) else RunTrigger.OPERATOR
        run, created = services.start_run(trigger, who(request))
        body = AuditRunSerializer(run).data
        if not created:
            raise ApiError(ResponseCode.SYSTEM_BUSY, f"audit run {run.pk} is already {run.status}", run=body)
        return Response(body, status=status.HTTP_202_ACCEPTED)


class RunView(APIView):
    permission_classes = [HasReadAccess]

    @extend_schema(
        operation_id="getAuditRun",
        responses={200: AuditRunSerializer},
        description="One run with its progress (stage, 0..1) while it runs and its summary after.",
    )
    def get(self, request, run_id: int):
        run = selectors.run(run_id)
        if run is None:
            raise ApiError(ResponseCode.INVALID_PARAMETER, f"no audit run {run_id}", status.HTTP_404_NOT_FOUND)
        return Response(AuditRunSerializer(run).data)


class _FindingsQuery(serializers.Serializer):
    run = serializers.RegexField(r"^(latest|\d{1,18})$", default="latest", error_messages={"invalid": "a run id or 'latest'"})
    kind = serializers.ChoiceField(choices=FindingKind.choices, required=False)
    cause = serializers.ChoiceField(choices=[c.value for c in Cause], required=False)
    limit = serializers.IntegerField(min_value=1, max_value=10_000, default=1000)


class FindingsView(APIView):
    permission_classes = [HasReadAccess]

    @extend_schema(
        operation_id="listAuditFindings",
        parameters=[
            OpenApiParameter("run", str, description="a run id, or 'latest' (the latest succeeded run; default)"),
            OpenApiParameter("kind", str, enum=list(FindingKind.values)),
            OpenApiParameter("cause", str, enum=[c.value for c in Cause]),
            OpenApiParameter("limit", int),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        query = _FindingsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        run = selectors.latest_finished_run() if q["run"] == "latest" else selectors.run(int(q["run"]))
        if run is None:
            raise ApiError(ResponseCode.INVALID_PARAMETER, f"no audit run {q['run']}", status.HTTP_404_NOT_FOUND)
        rows = selectors.findings(run, kind=q.get("kind"), cause=q.get("cause"), limit=q["limit"])
        return Response({"run": AuditRunSerializer(run).data, "findings": FindingSerializer(rows, many=True).data})


# --- pages --------------------------------------------------------------------------------------


@login_required
def results(request):
    chosen = request.GET.get("run", "")
    run = selectors.run(int(chosen)) if chosen.isdigit() else selectors.latest_finished_run()
    rows = list(selectors.findings(run, limit=PAGE_FINDINGS)) if run else []
    for f in rows:
        f.group_url = replica_group_url(f.broker_name) or replica_group_history_url(f.broker_name)
    return render(
        request,
        "audits/results.html",
        {
            "run": run,
            "active": selectors.active_run(),
            "runs": selectors.runs(10),
            "findings": rows,
            "charts": selectors.chart_series(run) if run else None,
            "is_operator": is_operator(request.user),
            "page_limit": PAGE_FINDINGS,
        },
    )


@login_required
@require_POST
def run_now(request):
    if not is_operator(request.user):
        raise PermissionDenied("only operators start audits")
    run, created = services.start_run(RunTrigger.OPERATOR, f"user:{request.user.get_username()}")
    if created:
        messages.success(request, f"Audit run {run.pk} queued.")
    else:
        messages.info(request, f"Audit run {run.pk} is already {run.status}.")
    return redirect("audits:results")
