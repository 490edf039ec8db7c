"""Drives the gateway's `/mcp` (streamable HTTP) with the official Python MCP SDK.

Usage: python gateway_mcp_client.py URL TOKEN QUERY [bench N]

Connects with `Authorization: Bearer TOKEN`, lists the tools, calls
`memory_search` and `memory_get`, and prints one JSON object with what it saw
(the Rust test `gateway_mcp.rs` asserts on it). With `bench N` it instead times
N warm `memory_search` calls and prints their latencies in milliseconds.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main():
    url, token, query = sys.argv[1], sys.argv[2], sys.argv[3]
    bench = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "bench" else 0
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    out = {}
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                out["server"] = dump(init.server_info)
                if bench:
                    await session.call_tool("memory_search", {"query": query})
                    times = []
                    for _ in range(bench):
                        t = time.perf_counter()
                        r = await session.call_tool("memory_search", {"query": query})
                        times.append((time.perf_counter() - t) * 1000)
                        assert not r.is_error, dump(r)
                    print(json.dumps({"latencies_ms": times}))
                    return
                tools = await session.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                r = await session.call_tool("memory_search", {"query": query, "limit": 3})
                out["search"] = dump(r)
                r = await session.call_tool("memory_get", {"path": "memory/2026-11-02.md", "lines": 3})
                out["get"] = dump(r)
    print(json.dumps(out))


asyncio.run(main())
