from django.conf import settings
from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from audits import urls as audits_urls
from audits.metrics import AuditFigures
from controlplane.errors import json_400, json_403, json_404, json_500
from controlplane.operations.metrics import metrics_view
from controlplane.readiness import readyz

handler400 = json_400
handler403 = json_403
handler404 = json_404
handler500 = json_500


def healthz(request):
    """The liveness probe: the process serves (its dependencies are /readyz's)."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    # Prometheus: the processes' counters and the cluster's state (controlplane/operations/metrics.py),
    # with the audits' figures, which that floor may not import.
    path("metrics", metrics_view(AuditFigures()), name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    *([path("api/v1/nameserver/", include("nameserver.urls"))] if "nameserver" in settings.CONTROLPLANE_ROLES else []),
    # ACL 2.0 users and policies of a cluster (docs/acl.md): the nameserver's, which hands them to the brokers
    *([path("api/v1/clusters/", include("nameserver.acl_urls"))] if "nameserver" in settings.CONTROLPLANE_ROLES else []),
    *(
        [path("api/v1/controller/", include("controlplane.controller.urls"))]
        if "controller" in settings.CONTROLPLANE_ROLES
        else []
    ),
    path("api/v1/operations/", include("controlplane.operations.urls")),
    # messages, traces, dead letters and connected clients of a cluster (docs/messages.md §5)
    path("api/v1/clusters/", include("controlplane.operations.messages_urls")),
    # offset-rollback audits: REST and the results page
    path("api/v1/audits/", include((audits_urls.api_urlpatterns, "audits-api"))),
    path("audits/", include((audits_urls.page_urlpatterns, "audits"))),
    path("", include("dashboards.urls")),
]
