"""The web page of `dsflow serve`: static files (dsflow/server/web/) served at `/`, no build step, no CDN.

Agreement with the REST API (dsflow/server/app.py, H-Server):
- The page calls the API with relative URLs (`api/v1/...`) and `Authorization: Bearer <token>`; the token comes
  from POST api/v1/auth/login or is pasted by the user, and is kept in sessionStorage only.
- Server-Sent Events (GET api/v1/topics/{relation}/tail) are read with fetch() and a streamed body, so the token
  travels in the Authorization header like every other call: no token in a URL (URLs end up in logs).
- Status entries are those of `dsflow status --json`; the page shows `input_rows_per_second` as rows/s and
  `lag_records` (with `lag`, {topic: {partition: records}}, in the query's details) as the lag, "-" without them.
- `mount(app)` registers GET / and GET /web/*, so it may be called before or after the API routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dsflow.errors import DsflowError

if TYPE_CHECKING:
    from fastapi import FastAPI

WEB_DIR = Path(__file__).with_name("web")
FILES = ("index.html", "app.js", "graph.js", "style.css")
"""The page's files in WEB_DIR."""

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def mount(app: FastAPI, directory: Path = WEB_DIR) -> None:
    """Serve the page at `/` and its assets under `/web/` (no authentication: the page holds no data; every API
    call it makes is authenticated)."""
    from fastapi.responses import FileResponse

    missing = [name for name in FILES if not (directory / name).is_file()]
    if missing:
        raise DsflowError("DSF-E360", f"the web page's files are missing from {directory}: {', '.join(missing)}",
                          hint="reinstall dsflow; its package data includes dsflow/server/web/")
    index = directory / "index.html"

    @app.get("/", include_in_schema=False)
    def web_index() -> FileResponse:
        return FileResponse(index, media_type="text/html", headers=SECURITY_HEADERS)

    app.mount("/web", _static_class()(directory=directory), name="web")


def _static_class() -> type:
    """StaticFiles (imported lazily) with the page's security headers on every file."""
    from fastapi.staticfiles import StaticFiles

    class StaticWithHeaders(StaticFiles):
        """StaticFiles that adds the page's security headers to each file."""

        def file_response(self, *args, **kwargs):
            response = super().file_response(*args, **kwargs)
            response.headers.update(SECURITY_HEADERS)
            return response

    return StaticWithHeaders
