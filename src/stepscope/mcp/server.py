"""The MCP server over stdio: the catalogue's tools, answered through the official SDK.

A thin adapter: ``tools/list`` lists ``catalog.tools()`` with their input schemas,
``tools/call`` asks ``Catalog.call`` in a worker thread (a run's first answer reads its
files) and gives the answer as compact JSON text and as structured content. A refusal or a
failure is a tool error whose text is one sentence, never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from stepscope.errors import StepscopeError
from stepscope.mcp import answers
from stepscope.mcp.catalog import Catalog, tools
from stepscope.version import __version__

_MAX_ERROR = 400  # characters of an error sentence

INSTRUCTIONS = (
    "stepscope answers where a profiled ML program's step time and memory go. Start with "
    "list_runs, then overview_page (step time, its breakdown, top ops, advice) for a run; "
    "framework_op_stats and kernel_stats for ops and GPU kernels; input_pipeline_analyzer "
    "for input-bound steps; pod_viewer for the straggler among hosts; trace_summary and "
    "trace_search for what happened in a time range. Every answer is at most "
    f"{answers.BUDGET_BYTES // 1024} KB of JSON: the main table's top rows ('limit'; the next "
    "page from 'offset', see 'page'), names longer than 80 characters shortened ('full_names' "
    "gives them whole), and 'omitted' counts what was left out. Times and sizes name their "
    "unit in their key (_ns, _us, _ms, _bytes, _percent) or in 'units'.")


def one_line(text: str) -> str:
    """``text`` as one line of at most ``_MAX_ERROR`` characters."""
    line = re.sub(r"\s+", " ", text).strip()
    return line if len(line) <= _MAX_ERROR else line[: _MAX_ERROR - 1] + "…"


def answer_call(catalog: Catalog, name: str, arguments: Any) -> types.CallToolResult:
    """One tool call's result: the answer, or one sentence with ``is_error``."""
    try:
        answer = catalog.call(name, arguments)
    except StepscopeError as err:
        return _error(str(err))
    except Exception as err:  # a failure of ours: one sentence, never a traceback
        return _error(f"stepscope could not answer {str(name)[:80]}: {type(err).__name__}: "
                      f"{err}")
    text = answers.to_text(answer)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=answer)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=one_line(message))],
                                is_error=True)


def listed_tools() -> list[types.Tool]:
    """Every tool as MCP lists it."""
    return [types.Tool(name=t.name, title=t.title, description=t.description,
                       input_schema=t.input_schema(),
                       annotations=types.ToolAnnotations(
                           title=t.title, read_only_hint=t.read_only,
                           destructive_hint=False, open_world_hint=not t.read_only))
            for t in tools()]


def make_server(catalog: Catalog) -> Server[Any]:
    """The SDK's server over ``catalog``."""
    listing = listed_tools()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result: types.CallToolResult = await anyio.to_thread.run_sync(
            answer_call, catalog, params.name, params.arguments)
        return result

    return Server("stepscope", version=__version__, title="stepscope profiler",
                  instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


def serve_stdio(logdir: str | Path, *, allow_capture: bool = False,
                use_cache: bool = True) -> None:
    """Serve the tools of ``logdir`` over stdin/stdout until the client closes them."""
    server = make_server(Catalog(logdir, allow_capture=allow_capture, use_cache=use_cache))

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
