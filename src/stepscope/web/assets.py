"""The bundled front end's files and the headers every response carries.

The files are built from ``frontend/`` into ``static/`` by ``make setup`` in a checkout, and
by the package build (``setup.py``) into every wheel and sdist; only files found there are
served, looked up by name, so no request can reach another path.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

STATIC = Path(__file__).parent / "static"

# Scripts, styles, images and requests only from this origin (ECharts sets inline styles).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; "
       "base-uri 'self'; frame-ancestors 'self'; form-action 'self'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer"}

NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>stepscope</title>
<p>This stepscope install has no web UI bundle. In a checkout, run <code>make setup</code>
(or <code>cd frontend &amp;&amp; npm ci &amp;&amp; npm run build</code>) and reload; otherwise
install stepscope from a wheel or sdist, which carry it.</p>"""

# The files without which the page cannot start.
REQUIRED = ("index.html", "app.js")


def missing_bundle_message() -> str | None:
    """One sentence saying the web UI bundle is missing and what to do, or None if present."""
    missing = [name for name in REQUIRED if not (STATIC / name).is_file()]
    if not missing:
        return None
    return (f"this stepscope install has no web UI bundle ({', '.join(missing)} missing "
            f"under {STATIC}): the page will only say so. In a checkout run `make setup`; "
            "otherwise install stepscope from a wheel or sdist, which carry it.")


def static_files() -> dict[str, Path]:
    """The bundled front end's files by name (only these are ever served)."""
    if not STATIC.is_dir():
        return {}
    return {p.name: p for p in STATIC.iterdir() if p.is_file() and not p.name.startswith(".")}


def static_reply(name: str) -> tuple[int, str, bytes]:
    """(status, media type, body) of one bundled file; index.html stands in for '/'."""
    files = static_files()
    if name not in files:
        if name == "index.html":
            return 200, "text/html; charset=utf-8", NOT_BUILT.encode()
        return 404, "text/plain; charset=utf-8", b"not found"
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in ("application/javascript", "text/javascript"):
        kind += "; charset=utf-8"
    return 200, kind, files[name].read_bytes()
