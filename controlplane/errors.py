"""RocketMQ response codes and the JSON error format of the REST API (ARCHITECTURE §4).

Every error body is ``{"code": <int>, "name": "<RocketMQ code name>", "detail": "..."}``; malformed
input adds ``"fields": {<field>: [messages]}``. Nothing ever answers with a traceback.
"""

from __future__ import annotations

import logging

from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from controlplane.codes import ResponseCode
from controlplane.validation import Invalid

log = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """A refusal with a RocketMQ code: raise it from a view (never from inside a transaction you
    want committed)."""

    def __init__(self, code: ResponseCode, detail: str, http_status: int = status.HTTP_409_CONFLICT, **extra):
        super().__init__(detail)
        self.status_code = http_status
        self.rocketmq_code = code
        self.extra = extra


def error_body(code: ResponseCode, detail: str, **extra) -> dict:
    return {"code": int(code), "name": code.name, "detail": detail, **extra}


def _flatten(detail) -> str:
    if isinstance(detail, list):
        return "; ".join(_flatten(d) for d in detail)
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    return str(detail)


def exception_handler(exc, context) -> Response:
    if isinstance(exc, Invalid):  # a pure check's refusal (controlplane.validation), as DRF's own
        exc = exceptions.ValidationError(exc.fields)
    if isinstance(exc, ApiError):
        return Response(error_body(exc.rocketmq_code, str(exc.detail), **exc.extra), status=exc.status_code)
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body = error_body(ResponseCode.INVALID_PARAMETER, "Invalid request: " + _flatten(fields), fields=fields)
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.ParseError | exceptions.UnsupportedMediaType):
        return Response(error_body(ResponseCode.INVALID_PARAMETER, str(exc.detail)), status=exc.status_code)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response = Response(error_body(ResponseCode.NO_PERMISSION, str(exc.detail)), status=401)
        response["WWW-Authenticate"] = 'Bearer realm="api"'
        return response
    if isinstance(exc, exceptions.PermissionDenied):
        return Response(error_body(ResponseCode.NO_PERMISSION, str(exc.detail)), status=403)
    if isinstance(exc, exceptions.MethodNotAllowed):
        return Response(error_body(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, str(exc.detail)), status=405)
    if isinstance(exc, exceptions.Throttled):
        return Response(error_body(ResponseCode.SYSTEM_BUSY, str(exc.detail)), status=429)
    if isinstance(exc, Http404 | exceptions.NotFound):
        return Response(error_body(ResponseCode.INVALID_PARAMETER, "Not found."), status=404)
    if isinstance(exc, exceptions.APIException):
        return Response(error_body(ResponseCode.SYSTEM_ERROR, str(exc.detail)), status=exc.status_code)
    log.exception("unhandled error in %s", context.get("view"))
    return Response(error_body(ResponseCode.SYSTEM_ERROR, "Internal error; see the server log."), status=500)


def json_404(request, exception=None) -> JsonResponse:
    return JsonResponse(error_body(ResponseCode.INVALID_PARAMETER, f"No such path: {request.path}"), status=404)


def json_500(request) -> JsonResponse:
    return JsonResponse(error_body(ResponseCode.SYSTEM_ERROR, "Internal error; see the server log."), status=500)
