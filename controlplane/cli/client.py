"""The control plane's REST API as the command line speaks it: the standard library's HTTP client, the
token, the answers (with their JSON text as it came) and the refusals as one line each."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import quote

import click

DEFAULT_URL = "http://127.0.0.1:8000"
API = "/api/v1/nameserver/static-topics"
NS = "/api/v1/nameserver"
CTL = "/api/v1/controller"
OPS = "/api/v1/operations"
AUDITS = "/api/v1/audits"


class Answer(dict):
    """An API answer, with its JSON text as it came (``--json`` prints that, not a re-encoding)."""

    raw = ""


class Api:
    """The control plane's REST API over the standard library's HTTP client: a command starts as a fresh
    process, and httpx with its TLS context costs one more process start (bench/dashboard.py's
    ``cli_cold_start_ms``). The token is read at the first call: help and usage errors need none. One
    connection per call: a confirmation may outwait the server's keep-alive."""

    def __init__(self, url: str, token_file: Path | None, as_json: bool):
        self.url, self.token_file, self.as_json = url.rstrip("/"), token_file, as_json
        self._token: str | None = None

    def _connection(self):
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise click.UsageError(f"--url {self.url!r}: give http://host:port or https://host:port")
        if parts.scheme == "https":
            import ssl

            return http.client.HTTPSConnection(parts.hostname, port, timeout=30, context=ssl.create_default_context())
        return http.client.HTTPConnection(parts.hostname, port, timeout=30)

    def _send(self, method: str, path: str, body: dict | None, params: dict | None) -> tuple[int, bytes]:
        import http.client
        from urllib.parse import urlencode, urlsplit

        if self._token is None:
            self._token = _token(self.token_file)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        target = urlsplit(self.url).path + path + (f"?{urlencode(params, doseq=True)}" if params else "")
        conn = self._connection()
        try:
            conn.request(method, target, body=data, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException) as exc:
            raise click.ClickException(f"cannot reach the control plane at {self.url}: {exc}") from None
        finally:
            conn.close()

    def fetch(self, path: str, params: dict | None = None) -> bytes:
        """A GET whose answer is not JSON (a message body, an export), as bytes; a refusal as ``call``'s."""
        status, raw = self._send("GET", path, None, params)
        if status != 200:
            self._answer(status, raw, path)  # raises: a refusal is JSON
        return raw

    def call(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> Answer:
        status, raw = self._send(method, path, body, params)
        return self._answer(status, raw, path)

    def _answer(self, status: int, raw: bytes, path: str) -> Answer:
        try:
            answer = json.loads(raw)
        except ValueError:
            text = raw[:200].decode(errors="replace")
            raise click.ClickException(f"HTTP {status} from {self.url}{path}: {text}") from None
        if status >= 400:
            if self.as_json:
                click.echo(raw.decode())
                sys.exit(1)
            detail = answer.get("detail", answer) if isinstance(answer, dict) else answer
            fields = answer.get("fields") if isinstance(answer, dict) else None
            name = f" {answer.get('code')} {answer.get('name')}" if isinstance(answer, dict) and "code" in answer else ""
            raise click.ClickException(f"refused (HTTP {status}{name}): {detail}" + (f" {fields}" if fields else ""))
        if not isinstance(answer, dict):
            raise click.ClickException(f"HTTP {status} from {self.url}{path}: not a JSON object")
        out = Answer(answer)
        out.raw = raw.decode()
        return out


class NoToken(click.ClickException):
    """One line, and a usage error's exit status (2): nothing was sent."""

    exit_code = 2


def _token(token_file: Path | None) -> str:
    if token_file is not None:
        return token_file.read_text().strip()
    token = os.environ.get("RMQHA_TOKEN", "").strip()
    if not token:
        raise NoToken("no token: give --token-file or set RMQHA_TOKEN (an admin's or an operator's API token)")
    return token


def seg(name: str) -> str:
    """A name as one path segment: names may hold ``%`` and ``|``."""
    return quote(name, safe="")
