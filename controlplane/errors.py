"""RocketMQ response codes and the JSON error format of the REST API (ARCHITECTURE §4).

Every error body is ``{"code": <int>, "name": "<RocketMQ code name>", "detail": "..."}``; malformed
input adds ``"fields": {<field>: [messages]}``. Nothing ever answers with a traceback.
"""

from __future__ import annotations

import logging
from enum import IntEnum

from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

log = logging.getLogger(__name__)


class ResponseCode(IntEnum):
    """``ResponseCode`` / ``RemotingSysResponseCode`` numbers (reference §1.12)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    INVALID_PARAMETER = 29
    BROKER_NOT_EXIST = 211
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014


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
