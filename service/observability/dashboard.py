"""The live latency dashboard: one self-contained HTML page (inline CSS, JS and SVG charts, nothing
fetched from elsewhere) and the JSON it polls, `app.state.stats.snapshot()` (see `service.observability.stats`).

    >>> app.include_router(dashboard.router)
    GET /dashboard       the page; it refreshes itself every 2 s from /dashboard/data
    GET /dashboard/data  the LiveStats snapshot as JSON

How the page formats each number (its tests hold it to this rule): milliseconds with 2 decimals,
requests/s and mean batch size with 1, the error rate as a percentage with 1 decimal ("2.4%"),
counts and the largest batch as integers, and "–" (an en dash) for a null.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

__all__ = ["router", "PAGE"]

# Read once at import: the page is static, only its data changes.
PAGE: str = resources.files("service.observability").joinpath("static/dashboard.html").read_text(encoding="utf-8")

router = APIRouter(tags=["dashboard"])


@router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
async def dashboard_page() -> HTMLResponse:
    # no-cache: a page left open across a server upgrade should pick up the new page on reload.
    return HTMLResponse(PAGE, headers={"Cache-Control": "no-cache"})


@router.get("/dashboard/data")
def dashboard_data(request: Request) -> JSONResponse:
    """Per-model request statistics over the rolling window (shape: `service.observability.stats.LiveStats.snapshot`)."""
    # A plain def, so it runs in the thread pool: under heavy traffic a snapshot sorts some
    # 100k samples per model, which must not stall the event loop that serves inference.
    snapshot = request.app.state.stats.snapshot()
    manager = getattr(request.app.state, "manager", None)
    if manager is not None:
        snapshot["memory"] = manager.memory_summary()
    return JSONResponse(snapshot, headers={"Cache-Control": "no-store"})
