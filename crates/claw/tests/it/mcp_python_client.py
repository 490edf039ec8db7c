"""Drives `claw mcp` over stdio with the official Python MCP SDK (PyPI `mcp`).

Usage: python mcp_python_client.py CLAW_BINARY QUERY APPEND_TEXT [bench N | readonly]

The environment (CLAW_WORKSPACE, CLAW_NOW, the model paths) is passed to claw.
Prints one JSON object with what each step saw; the Rust test
(`mcp_server.rs`) asserts on it. With `bench N` it instead times N warm
`memory_search` calls and prints their latencies in milliseconds; with
`readonly` it lists the tools and tries `memory_append`.
"""

import asyncio
import json
import os
import sys
import time

from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def call_error(session, name, arguments):
    """The JSON-RPC error of a call, or what came back instead."""
    try:
        result = await session.call_tool(name, arguments)
    except MCPError as e:
        return {"code": e.error.code, "message": e.error.message}
    return {"unexpected_result": dump(result)}


async def main():
    claw, query, append_text = sys.argv[1], sys.argv[2], sys.argv[3]
    bench = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "bench" else 0
    readonly = len(sys.argv) > 4 and sys.argv[4] == "readonly"
    params = StdioServerParameters(command=claw, args=["mcp"], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = dump(init.server_info)
            out["capabilities"] = dump(init.capabilities)
            if bench:
                await session.call_tool("memory_search", {"query": query})
                times = []
                checked = []
                queries = [query, "weekly review", "project ideas", "reading list", "garden notes"]
                for i in range(bench):
                    t = time.perf_counter()
                    r = await session.call_tool("memory_search", {"query": queries[i % len(queries)]})
                    times.append((time.perf_counter() - t) * 1000)
                    assert not r.is_error, dump(r)
                    checked.append(r.structured_content["sync"].get("checked_ms"))
                print(json.dumps({"latencies_ms": times, "sync_checked_ms": checked}))
                return
            tools = await session.list_tools()
            out["tools"] = [dump(t) for t in tools.tools]
            if readonly:
                out["append_error"] = await call_error(session, "memory_append", {"text": append_text})
                print(json.dumps(out))
                return

            search = await session.call_tool("memory_search", {"query": query, "limit": 5})
            out["search"] = dump(search)

            hits = (search.structured_content or {}).get("results", [])
            if hits:
                got = await session.call_tool(
                    "memory_get", {"path": hits[0]["path"], "from": hits[0]["start_line"], "lines": 3}
                )
                out["get"] = dump(got)

            out["errors"] = {
                "wrong_type": await call_error(session, "memory_search", {"query": 3}),
                "unknown_field": await call_error(session, "memory_search", {"query": "x", "bogus": 1}),
                "bad_limit": await call_error(session, "memory_search", {"query": "x", "limit": 0}),
                "bad_mode": await call_error(session, "memory_search", {"query": "x", "mode": "psychic"}),
                "missing_query": await call_error(session, "memory_search", {}),
                "not_indexed": await call_error(session, "memory_get", {"path": "memory/nope.md"}),
                "dotdot": await call_error(session, "memory_get", {"path": "../etc/passwd"}),
                "unknown_tool": await call_error(session, "memory_delete", {}),
                "bad_target": await call_error(session, "memory_append", {"text": "x", "target": "/etc/passwd"}),
            }

            # Still alive after the bad calls: concurrent searches all answer.
            t = time.perf_counter()
            many = await asyncio.gather(
                *[session.call_tool("memory_search", {"query": q}) for q in [query] * 4 + ["deadline", "budget", "retry", "webhook"]]
            )
            out["concurrent"] = {
                "n": len(many),
                "errors": sum(1 for r in many if r.is_error),
                "queries": [r.structured_content["query"] for r in many],
                "elapsed_ms": (time.perf_counter() - t) * 1000,
            }

            status = await session.call_tool("memory_status", {})
            out["status"] = dump(status)

            appended = await session.call_tool("memory_append", {"text": append_text, "heading": "From MCP"})
            out["append"] = dump(appended)
            after = await session.call_tool("memory_search", {"query": append_text, "mode": "fts"})
            out["after_append"] = dump(after)

            resources = await session.list_resources()
            out["resources"] = [dump(r) for r in resources.resources]
            out["resource_texts"] = {}
            for r in resources.resources:
                read = await session.read_resource(r.uri)
                out["resource_texts"][str(r.uri)] = [c.text for c in read.contents]
            try:
                await session.read_resource("memory://../secrets.md")
                out["bad_resource"] = "read"
            except MCPError as e:
                out["bad_resource"] = {"code": e.error.code, "message": e.error.message}
    print(json.dumps(out))


asyncio.run(main())
