"""An operation refused before anything changed, as REST answers it (the dashboard's actions shape the
same fields as their JSON)."""

from __future__ import annotations

from controlplane.errors import ApiError
from mqrules.codes import ResponseCode


class Refused(Exception):
    """``status``: the HTTP status; ``code``: the RocketMQ code (a broker's own number outside the known
    ones is SYSTEM_ERROR); ``fields``: field errors for a 400."""

    def __init__(self, status: int, code: int, detail: str, fields: dict | None = None):
        super().__init__(detail)
        self.status, self.detail, self.fields = status, detail, fields
        try:
            self.code = ResponseCode(code)
        except ValueError:
            self.code = ResponseCode.SYSTEM_ERROR

    def api_error(self) -> ApiError:
        return ApiError(self.code, self.detail, self.status, **({"fields": self.fields} if self.fields else {}))
