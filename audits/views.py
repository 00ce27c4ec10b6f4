"""REST endpoints (/api/v1/audits/) and the results page (/audits/): thin, each calls one service or
selector. Tokens: broker (or admin) to report events, admin (or an operator login) to start a run, any
token or a login to read. The page's "Run audit now" needs an operator login and CSRF."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import HasReadAccess, IsAdmin, IsBroker, TokenPrincipal, caller_of, is_operator, who
from controlplane.errors import ApiError, ResponseCode
from controlplane.openapi import AUTH, BODY, errors
from controlplane.validation_drf import checked_param, pattern_field, query_integer_field
from mqrules import validation as v
from spark_jobs.schema import Cause

from . import selectors, services
from .events import OFFSET_EVENTS_SCHEMA, parse_offset_events
from .models import FindingKind, RunTrigger
from .serializers import AuditRunSerializer, FindingSerializer, replica_group_history_url, replica_group_url

PAGE_FINDINGS = 500
_RUN_ID_DIGITS = "[0-9]{1,18}"  # a run id as text (fits a Java long)
_RUN = f"^(?:latest|{_RUN_ID_DIGITS})$"  # ?run= of the findings: a run id or "latest"
_RUN_ID_TEXT = v.matching(f"^{_RUN_ID_DIGITS}$", "a run id", 18)
_RUN_ID_CHECK = v.integer(0, v.MAX_ID)
_RUN_ID = OpenApiParameter("run_id", {"type": "integer", "minimum": 0, "maximum": v.MAX_ID}, OpenApiParameter.PATH, required=True)


# --- REST ---------------------------------------------------------------------------------------


class OffsetEventsView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="reportOffsetEvents",
        request={"application/json": OFFSET_EVENTS_SCHEMA},
        responses={
            202: inline_serializer("OffsetEventsAccepted", {"accepted": serializers.IntegerField()}),
            **errors(*BODY, 429, why={429: "The event buffer is full, report again later: 2 SYSTEM_BUSY."}),
        },
        description="A broker's batch of consumer-offset commits for the event store (docs/audits.md). "
        "400 + 29 with field errors; 429 + 2 when the buffer is full.",
    )
    def post(self, request):
        batch = parse_offset_events(request.data)
        caller_of(request).check(clusters=[batch.cluster_name], broker_sets=[batch.broker_name])
        return Response({"accepted": services.report_offset_events(batch)}, status=status.HTTP_202_ACCEPTED)


class _ListQuery(serializers.Serializer):
    limit = query_integer_field(min_value=1, max_value=1000, default=20)


class RunsView(APIView):
    def get_permissions(self):
        return [IsAdmin()] if self.request.method == "POST" else [HasReadAccess()]

    @extend_schema(
        operation_id="listAuditRuns",
        parameters=[_ListQuery],
        responses={
            200: inline_serializer(
                "AuditRuns",
                {
                    "runs": AuditRunSerializer(many=True, help_text="newest first"),
                    "activeRunId": serializers.IntegerField(allow_null=True, help_text="the queued or running run"),
                },
            ),
            **errors(400, *AUTH),
        },
    )
    def get(self, request):
        query = _ListQuery(data=request.query_params.dict())
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
        responses={
            202: AuditRunSerializer,
            **errors(
                *AUTH,
                why={409: "One is already queued or running: 2 SYSTEM_BUSY, with that run as `run`."},
            ),
        },
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
        parameters=[_RUN_ID],
        responses={200: AuditRunSerializer, **errors(400, *AUTH, why={404: "No such run: 29 INVALID_PARAMETER."})},
        description="One run with its progress (stage, 0..1) while it runs and its summary after.",
    )
    def get(self, request, run_id: int):
        checked_param("run_id", run_id, _RUN_ID_CHECK)
        run = selectors.run(run_id)
        if run is None:
            raise ApiError(ResponseCode.INVALID_PARAMETER, f"no audit run {run_id}", status.HTTP_404_NOT_FOUND)
        return Response(AuditRunSerializer(run).data)


class _FindingsQuery(serializers.Serializer):
    run = pattern_field(
        v.matching(_RUN, "a run id or 'latest'", 18),
        _RUN,
        18,
        default="latest",
        help_text="a run id, or 'latest' (the latest succeeded run; default)",
    )
    kind = serializers.ChoiceField(choices=FindingKind.choices, required=False)
    cause = serializers.ChoiceField(choices=[c.value for c in Cause], required=False)
    limit = query_integer_field(min_value=1, max_value=10_000, default=1000)


class FindingsView(APIView):
    permission_classes = [HasReadAccess]

    @extend_schema(
        operation_id="listAuditFindings",
        parameters=[_FindingsQuery],
        responses={
            200: inline_serializer("AuditFindings", {"run": AuditRunSerializer(), "findings": FindingSerializer(many=True)}),
            **errors(400, *AUTH, why={404: "No such run, or no run has succeeded yet: 29 INVALID_PARAMETER."}),
        },
    )
    def get(self, request):
        query = _FindingsQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        q = query.validated_data
        run = selectors.latest_finished_run() if q["run"] == "latest" else selectors.run(int(q["run"]))
        if run is None:
            raise ApiError(ResponseCode.INVALID_PARAMETER, f"no audit run {q['run']}", status.HTTP_404_NOT_FOUND)
        cluster = caller_of(request).bound_cluster or None  # a bound token reads its cluster's findings
        rows = selectors.findings(run, kind=q.get("kind"), cause=q.get("cause"), cluster_name=cluster, limit=q["limit"])
        return Response({"run": AuditRunSerializer(run).data, "findings": FindingSerializer(rows, many=True).data})


# --- pages --------------------------------------------------------------------------------------


@login_required
def results(request):
    chosen = request.GET.get("run", "")
    run = selectors.run(int(chosen)) if _RUN_ID_TEXT(chosen) is None else selectors.latest_finished_run()
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
