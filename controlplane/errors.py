"""RocketMQ response codes and the JSON error format of the REST API (ARCHITECTURE §4).

Every error body is ``{"code": <int>, "name": "<RocketMQ code name>", "detail": "..."}``; malformed
input (400) adds ``"fields": {<field>: [messages]}``. Nothing ever answers with a traceback, nor, under
/api/, with an HTML page: Django's own 400 (a body over DATA_UPLOAD_MAX_MEMORY_SIZE read before a
view runs: 413), 403, 404 and 500 are JSON there too (``handler400`` ... in controlplane/urls.py).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response

from mqrules.codes import ResponseCode
from mqrules.validation import NON_FIELD, Invalid, escaped

log = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """A refusal with a RocketMQ code: raise it from a view (never from inside a transaction you
    want committed)."""

    def __init__(self, code: ResponseCode, detail: str, http_status: int = status.HTTP_409_CONFLICT, **extra):
        super().__init__(detail)
        self.status_code = http_status
        self.rocketmq_code = code
        self.extra = extra


class PayloadTooLarge(exceptions.APIException):
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE (the JSON parser's limit, controlplane.validation_drf)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "payload_too_large"


def too_large_detail() -> str:
    return f"Request body larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."


def error_body(code: ResponseCode, detail: str, **extra) -> dict:
    return _encodable({"code": int(code), "name": code.name, "detail": detail, **extra})


def _encodable(value):
    """An error body that can always be written as UTF-8: a field error may quote what was sent (an
    unknown key with a lone surrogate, say), which would otherwise fail the answer itself."""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    return value


def _flatten(detail) -> str:
    if isinstance(detail, list):
        return "; ".join(_flatten(d) for d in detail)
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    return str(detail)


def exception_handler(exc, context) -> Response:
    if isinstance(exc, Invalid):  # a pure check's refusal (mqrules.validation), as DRF's own
        exc = exceptions.ValidationError(exc.fields)
    if isinstance(exc, ApiError):
        return Response(error_body(exc.rocketmq_code, str(exc.detail), **exc.extra), status=exc.status_code)
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body = error_body(ResponseCode.INVALID_PARAMETER, "Invalid request: " + _flatten(fields), fields=fields)
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.ParseError):
        detail = str(exc.detail)
        return Response(error_body(ResponseCode.INVALID_PARAMETER, detail, fields={NON_FIELD: [detail]}), status=400)
    if isinstance(exc, RequestDataTooBig):  # Django's limit, met when something read request.body
        exc = PayloadTooLarge(too_large_detail())
    if isinstance(exc, exceptions.UnsupportedMediaType | PayloadTooLarge):
        return Response(error_body(ResponseCode.INVALID_PARAMETER, str(exc.detail)), status=exc.status_code)
    if isinstance(exc, SuspiciousOperation):  # e.g. a form of more than DATA_UPLOAD_MAX_NUMBER_FIELDS fields
        return Response(_bad_request_body(exc), status=400)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response = Response(error_body(ResponseCode.NO_PERMISSION, str(exc.detail)), status=401)
        response["WWW-Authenticate"] = 'Bearer realm="api"'
        return response
    if isinstance(exc, exceptions.PermissionDenied):
        return Response(error_body(ResponseCode.NO_PERMISSION, str(exc.detail)), status=403)
    if isinstance(exc, exceptions.MethodNotAllowed):
        return Response(error_body(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, str(exc.detail)), status=405)
    if isinstance(exc, exceptions.Throttled):
        headers = {"Retry-After": str(int(exc.wait) + 1)} if exc.wait is not None else None
        return Response(error_body(ResponseCode.SYSTEM_BUSY, str(exc.detail)), status=429, headers=headers)
    if isinstance(exc, Http404 | exceptions.NotFound):
        return Response(error_body(ResponseCode.INVALID_PARAMETER, "Not found."), status=404)
    if isinstance(exc, exceptions.APIException):
        return Response(error_body(ResponseCode.SYSTEM_ERROR, str(exc.detail)), status=exc.status_code)
    log.exception("unhandled error in %s", context.get("view"))
    return Response(error_body(ResponseCode.SYSTEM_ERROR, "Internal error; see the server log."), status=500)


def _bad_request_body(exc: BaseException | None) -> dict:
    detail = "Bad request: " + (str(exc) if exc is not None and str(exc) else type(exc).__name__)
    return error_body(ResponseCode.INVALID_PARAMETER, detail, fields={NON_FIELD: [detail]})


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def json_400(request, exception=None):
    """Django's 400 (``handler400``), met before a view runs, e.g. the audit middleware reading a body
    over DATA_UPLOAD_MAX_MEMORY_SIZE (then 413): JSON under /api/, Django's page elsewhere."""
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse(error_body(ResponseCode.INVALID_PARAMETER, too_large_detail()), status=413)
    return JsonResponse(_bad_request_body(exception), status=400)


def json_403(request, exception=None):
    """Django's 403 (``handler403``): JSON under /api/, Django's page elsewhere."""
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return JsonResponse(error_body(ResponseCode.NO_PERMISSION, "Permission denied."), status=403)


def json_404(request, exception=None) -> JsonResponse:
    return JsonResponse(error_body(ResponseCode.INVALID_PARAMETER, f"No such path: {request.path}"), status=404)


def json_500(request) -> JsonResponse:
    return JsonResponse(error_body(ResponseCode.SYSTEM_ERROR, "Internal error; see the server log."), status=500)
