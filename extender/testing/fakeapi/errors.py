"""Kubernetes ``Status`` errors as raised inside the fake API server.

Contract:
    * Every failure the server reports is an :class:`ApiError`; the HTTP layer turns it into a
      ``metav1.Status`` body (``kind: Status``, ``apiVersion: v1``, ``status: Failure``,
      ``message``, ``reason``, ``details``, ``code``) sent with HTTP status ``code``. That is the
      shape ``kubernetes.client.exceptions.ApiException`` exposes as ``.status`` / ``.body``.
    * Messages follow the real kube-apiserver wording where clients (or humans reading test
      failures) may look at them, e.g. ``pods "p" not found`` or
      ``Operation cannot be fulfilled on pods "p": the object has been modified; ...``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "REASON_FOR_CODE",
    "status_success",
    "not_found",
    "already_exists",
    "conflict",
    "conflict_modified",
    "invalid",
    "bad_request",
    "too_many_requests",
    "expired",
    "internal_error",
    "method_not_allowed",
    "unsupported_media_type",
    "forbidden",
    "resource_not_found",
]

#: Default ``reason`` for an HTTP code, mirroring ``k8s.io/apimachinery/pkg/api/errors``.
REASON_FOR_CODE: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error answered as a ``Status`` object with HTTP status ``code``."""

    def __init__(
        self,
        code: int,
        reason: str | None,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = int(code)
        self.reason = reason if reason is not None else REASON_FOR_CODE.get(self.code, "Unknown")
        self.message = message
        self.details = details
        self.headers = dict(headers or {})

    def status(self) -> dict[str, Any]:
        """The ``metav1.Status`` body for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def status_success(code: int = 200) -> dict[str, Any]:
    """The ``Status`` a real server answers for subresource creates (binding, eviction)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def _details(name: str | None, group: str, kind: str, causes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = kind
    if causes:
        d["causes"] = causes
    return d


def not_found(group_resource: str, name: str, *, group: str = "", kind: str | None = None) -> ApiError:
    """``pods "x" not found`` (404)."""
    res = kind or group_resource.split(".", 1)[0]
    return ApiError(404, "NotFound", f'{group_resource} "{name}" not found', _details(name, group, res))


def resource_not_found() -> ApiError:
    """404 for an unknown path / resource type (what a real server says for an absent CRD)."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(group_resource: str, name: str, *, group: str = "") -> ApiError:
    res = group_resource.split(".", 1)[0]
    return ApiError(409, "AlreadyExists", f'{group_resource} "{name}" already exists', _details(name, group, res))


def conflict(group_resource: str, name: str, why: str, *, group: str = "") -> ApiError:
    """``Operation cannot be fulfilled on <gr> "<name>": <why>`` (409)."""
    res = group_resource.split(".", 1)[0]
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {group_resource} "{name}": {why}', _details(name, group, res)
    )


def conflict_modified(group_resource: str, name: str, *, group: str = "") -> ApiError:
    return conflict(
        group_resource,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
        group=group,
    )


def invalid(kind: str, name: str, errors: list[tuple[str, str, str]], *, group: str = "") -> ApiError:
    """422 Invalid; ``errors`` holds ``(field, reason, message)`` triples.

    ``reason`` is a ``metav1.CauseType`` such as ``FieldValueRequired`` / ``FieldValueInvalid`` /
    ``FieldValueForbidden``; ``message`` is the human part, e.g. ``Required value``.
    """
    parts = [f"{field}: {msg}" if field else msg for field, _, msg in errors]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    causes = [{"reason": r, "message": m, "field": f} for f, r, m in errors]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {joined}', _details(name, group, kind, causes))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def too_many_requests(message: str, causes: list[dict[str, str]] | None = None) -> ApiError:
    details: dict[str, Any] | None = {"causes": causes} if causes else None
    return ApiError(429, "TooManyRequests", message, details)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def internal_error(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}",
        {"causes": [{"message": f"unsupported content type {content_type!r}"}]},
    )


def forbidden(group_resource: str, name: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'{group_resource} "{name}" is forbidden: {why}')
