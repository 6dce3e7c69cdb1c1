"""A TensorBoard plugin: ``tensorboard --logdir logs`` shows a "stepscope" tab with our UI.

TensorBoard finds it through the ``tensorboard_plugins`` entry point. It serves the same
pages and the same JSON API as ``stepscope serve``, under ``/data/plugin/stepscope/``;
TensorBoard is WSGI: requests go through ``routes.dispatch``, the route table ``stepscope
serve``'s ASGI app answers from too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tensorboard.plugins import base_plugin
from werkzeug import Request, Response

from stepscope.model.logdir import list_runs
from stepscope.web.api import Api
from stepscope.web.assets import SECURITY_HEADERS, static_reply
from stepscope.web.routes import ApiRequest, dispatch

PLUGIN_NAME = "stepscope"
PREFIX = f"/data/plugin/{PLUGIN_NAME}"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class StepscopePlugin(base_plugin.TBPlugin):  # type: ignore[misc]
    """Serves the stepscope UI inside TensorBoard."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: Any) -> None:
        self._logdir = context.logdir or ""
        self._api = Api(self._logdir) if self._logdir else None

    def get_plugin_apps(self) -> dict[str, WsgiApp]:
        return {"/index.js": self._app, "/index.html": self._app, "/static/*": self._app,
                "/api/*": self._app}

    def is_active(self) -> bool:
        return bool(self._logdir) and bool(list_runs(self._logdir))

    def frontend_metadata(self) -> Any:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="stepscope",
                                            disable_reload=True)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]
             ) -> Iterable[bytes]:
        response = self._respond(Request(environ))
        return response(environ, start_response)  # type: ignore[no-any-return]

    def _respond(self, request: Request) -> Response:
        """The answer to one request under ``/data/plugin/stepscope/``."""
        path = request.path
        route = path[len(PREFIX):] if path.startswith(PREFIX) else path
        if route.startswith("/api/") and self._api is not None:
            call = ApiRequest(
                query=request.args.to_dict(),
                body=request.get_data(cache=False) if request.method == "POST" else b"",
                content_type=request.content_type or "", origin=request.headers.get("Origin"),
                host=request.host)
            reply = dispatch(self._api, request.method, route[len("/api/"):], call)
            response = Response(reply.body, status=reply.status,
                                content_type=reply.content_type, headers=reply.headers)
        else:
            name = {"/index.js": "tb_entry.js", "/index.html": "index.html"}.get(
                route, route[len("/static/"):] if route.startswith("/static/") else "")
            status, kind, body = static_reply(name)
            response = Response(body, status=status, content_type=kind)
        response.headers.update(SECURITY_HEADERS)
        return response
