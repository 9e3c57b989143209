"""Bearer-token checks for the two kinds of endpoints: management, and inference/metadata.

Management (upload, delete, labels, repository load/unload) needs the admin token when one is set;
with none set it is open only while the server listens on loopback, so that a server exposed on a
network is never writable by anyone who can reach it. Inference needs the API token when one is set
(the admin token works there too). Health, metrics and the docs stay open for probes and scrapers.
"""

from __future__ import annotations

import hmac

from fastapi import Request, Security
from fastapi.security import HTTPBearer

from service.errors import Forbidden, Unauthorized
from service.settings import Settings

__all__ = ["require_admin", "require_api", "check_admin", "check_api", "ADMIN_SCHEME", "API_SCHEME"]

# The bearer schemes, as the OpenAPI document names them: a Security dependency is how FastAPI puts
# `security` on an operation (service.protocols.openapi then fits it to the settings). They only
# document: the checks below read the header themselves (a malformed one is a 401, not "no token").
ADMIN_SCHEME = HTTPBearer(scheme_name="adminToken", auto_error=False)
API_SCHEME = HTTPBearer(scheme_name="apiToken", auto_error=False)


# RFC 9110: a 401 says which scheme would do.
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _bearer(header: str | None) -> str | None:
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'", _CHALLENGE)
    return token.strip()


def _matches(token: str, *secrets) -> bool:
    return any(s is not None and hmac.compare_digest(token.encode(), s.get_secret_value().encode()) for s in secrets)


def check_admin(settings: Settings, authorization: str | None) -> None:
    """Unauthorized or Forbidden unless `authorization` (the header's or the gRPC metadata's value)
    may manage the repository."""
    token = _bearer(authorization)
    if settings.admin_token is None:
        if not settings.management_open_without_token():
            raise Forbidden(
                f"management endpoints are disabled: the server listens on {settings.host}, beyond loopback, "
                "and TENSORGATE_ADMIN_TOKEN is not set"
            )
        return
    if token is None:
        raise Unauthorized("this endpoint needs 'Authorization: Bearer <admin token>'", _CHALLENGE)
    if not _matches(token, settings.admin_token):
        raise Forbidden("the bearer token is not the admin token")


def check_api(settings: Settings, authorization: str | None) -> None:
    """Unauthorized or Forbidden unless `authorization` may run inference and read metadata."""
    if settings.api_token is None:
        return
    token = _bearer(authorization)
    if token is None:
        raise Unauthorized("this endpoint needs 'Authorization: Bearer <token>' (TENSORGATE_API_TOKEN is set)",
                           _CHALLENGE)
    if not _matches(token, settings.api_token, settings.admin_token):
        raise Forbidden("the bearer token is not valid for this server")


async def require_admin(request: Request, _documented: object = Security(ADMIN_SCHEME)) -> None:
    """FastAPI dependency of the management routes."""
    check_admin(request.app.state.settings, request.headers.get("authorization"))


async def require_api(request: Request, _documented: object = Security(API_SCHEME)) -> None:
    """FastAPI dependency of the inference and metadata routes."""
    check_api(request.app.state.settings, request.headers.get("authorization"))
