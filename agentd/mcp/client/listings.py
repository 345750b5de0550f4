"""The catalogue of one MCP client: what its server lists, kept current.

:class:`Listings` is one part of :class:`~agentd.mcp.client.facade.MCPClient`, with
its own state (the tools, the resources and templates, what was left out and
why, the ttl clock :class:`~agentd.mcp.client.rules.catalogue.Freshness`), handed the
request loop and the connection.  It drains the paginated lists (at most
``MAX_LIST_PAGES`` pages), admits each tool (:func:`~agentd.mcp.client.rules.catalogue.admit`)
and audit-logs the result; a ``list_changed`` notification re-lists once (one
re-list in flight covers every change meanwhile), and a (re)connect re-lists
all of it, or at 2026-07-28 only what its ``ttlMs`` let expire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

import msgspec
import orjson

from agentd.errors import ToolFault
from agentd.log import Logger
from agentd.mcp.client.connection import MAX_AUDIT_TEXT, Connection
from agentd.mcp.client.request_loop import RequestLoop
from agentd.mcp.client.rules.catalogue import Excluded, Freshness, admit
from agentd.wire import mcp2026 as m26
from agentd.wire import mcp_types as mt
from agentd.wire.shapes import ResourceInfo, ToolInfo

__all__ = ["MAX_LIST_PAGES", "Listings"]

MAX_LIST_PAGES: Final = 1024
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any] | None"]


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


class Listings:
    """The client's catalogue; see the module docstring."""

    def __init__(self, name: str, log: Logger, conn: Connection, requests: RequestLoop, *,
                 max_schema_depth: int, spawn: Spawn,
                 on_tools_changed: Callable[[], None]) -> None:
        self.name = name
        self.log = log
        self._conn = conn
        self._requests = requests
        self._max_schema_depth = max_schema_depth
        self._spawn = spawn
        self._on_tools_changed = on_tools_changed
        self._fresh = Freshness()  # when the tools / resources may be re-listed (ttlMs)
        self._relisting: dict[str, asyncio.Task[Any]] = {}
        self.rejected_tools: dict[str, str] = {}  # name -> why it is left out (catalogue)
        self.tools: dict[str, ToolInfo] = {}
        self.tools_version = 0
        self.resources: list[ResourceInfo] = []
        self.resource_templates: list[mt.ResourceTemplate] = []

    # ------------------------------------------------------------ re-listing

    def changed(self, what: str) -> None:
        """The server said its ``what`` ("tools" or "resources") list changed."""
        self._fresh.invalidate(what)
        self._schedule(what)

    def _schedule(self, what: str) -> None:
        task = self._relisting.get(what)
        if task is not None and not task.done():
            return  # one re-list in flight already covers this change
        fn = self.list_tools if what == "tools" else self.refresh_resources
        task = self._spawn(fn(), f"relist.{what}")
        if task is not None:
            self._relisting[what] = task

    async def relist(self, *, only_stale: bool) -> None:
        """List what the server offers (only what its ttl let expire when ``only_stale``)."""
        caps = self._conn.session.capabilities
        now = time.monotonic()
        if caps.tools and (not only_stale or self._fresh.stale("tools", now)):
            await self.list_tools()
        if caps.resources and (not only_stale or self._fresh.stale("resources", now)):
            await self.refresh_resources()

    def relist_changed(self, honoured: m26.SubscriptionFilter) -> None:
        """A list change missed while a listen stream was down: re-read where the
        ttl allows it."""
        now = time.monotonic()
        if honoured.toolsListChanged and self._fresh.stale("tools", now):
            self._schedule("tools")
        if honoured.resourcesListChanged and self._fresh.stale("resources", now):
            self._schedule("resources")

    # ------------------------------------------------------------ tools

    async def list_tools(self) -> list[ToolInfo]:
        """Drain ``tools/list`` (≤ 1024 pages), replace the catalogue, audit-log it."""
        tools: dict[str, ToolInfo] = {}
        dupes = 0
        rev = self._conn.session.revision
        rejected: dict[str, str] = {}
        self._fresh.listing("tools")
        listed, ttl = await self._drain(mt.TOOLS_LIST, mt.ListToolsResult, _tools)
        for t in listed:
            if t.name in tools:
                dupes += 1
                continue
            # x-mcp-header (SEP-2243) counts where the revision says; agentd declares no tasks
            decls = admit(t, headers=rev.param_headers, tasks=False,
                          max_depth=self._max_schema_depth)
            if isinstance(decls, Excluded):
                rejected[t.name] = decls.reason
                self.log.warning("mcp.tools.excluded", tool=t.name[:200],
                                 reason=decls.reason[:300])
                continue
            tools[t.name] = ToolInfo(
                name_header=rev.name_header(t.name),
                param_headers=decls,
                name=t.name, input_schema=t.inputSchema or {},
                description=_s(t.description), title=_s(t.title),
                output_schema=t.outputSchema if isinstance(t.outputSchema, dict) else None,
                annotations=msgspec.to_builtins(t.annotations) if t.annotations else {},
                name_json=orjson.dumps(t.name))
        self.tools = tools
        self.rejected_tools = rejected
        self._fresh.listed("tools", ttl or 0, time.monotonic())
        self.tools_version += 1
        self.log.info("mcp.tools.audit", count=len(tools), duplicates=dupes, tools=[
            {"name": t.name, "title": t.title, "description": t.description[:MAX_AUDIT_TEXT],
             "annotations": t.annotations} for t in tools.values()])
        self._on_tools_changed()
        return list(tools.values())

    # ------------------------------------------------------------ resources

    async def _drain(self, method: str, type_: type, items_of: Callable[[Any], list]
                     ) -> tuple[list, int | None]:
        """Every page of a paginated list (at most ``MAX_LIST_PAGES``): the items in
        order, and the smallest ``ttlMs`` of its pages (None where the revision has none)."""
        items: list = []
        cursor: str | None = None
        ttl: int | None = None
        rev = self._conn.session.revision
        requests = self._requests
        for _ in range(MAX_LIST_PAGES):
            params = mt.PaginatedParams(cursor=cursor) if cursor is not None else msgspec.UNSET
            raw = await requests.request(method, params)
            page = requests.decode(raw, type_, method)
            page_ttl = rev.ttl_ms(raw)
            if page_ttl is not None:
                ttl = page_ttl if ttl is None else min(ttl, page_ttl)
            items.extend(items_of(page))
            cursor = page.nextCursor if page.nextCursor else None
            if cursor is None:
                return items, ttl
        raise ToolFault(self.name, f"{method} of server {self.name!r} did not end after "
                        f"{MAX_LIST_PAGES} pages", retryable=False, method=method)

    async def list_resources(self) -> list[ResourceInfo]:
        """Drain ``resources/list`` into the catalogue (URIs and metadata, never bodies)."""
        res, ttl = await self._drain(mt.RESOURCES_LIST, mt.ListResourcesResult, _resources)
        if ttl is not None:
            self._fresh.listed("resources", ttl, time.monotonic())
        self.resources = [ResourceInfo(
            server=self.name, uri=r.uri, name=r.name,
            description=_s(r.description), mime_type=_s(r.mimeType),
            size=r.size if isinstance(r.size, int) else None) for r in res]
        return self.resources

    async def list_resource_templates(self) -> list[mt.ResourceTemplate]:
        """``resources/templates/list``: kept as information only (never subscribed)."""
        self.resource_templates, _ = await self._drain(
            mt.RESOURCES_TEMPLATES_LIST, mt.ListResourceTemplatesResult, _templates)
        return self.resource_templates

    async def refresh_resources(self) -> None:
        self._fresh.listing("resources")
        await self.list_resources()
        try:
            await self.list_resource_templates()
        except ToolFault as exc:  # optional for servers; informational anyway
            self.log.info("mcp.templates.unavailable", error=exc.message)


def _tools(page: mt.ListToolsResult) -> list:
    return page.tools


def _resources(page: mt.ListResourcesResult) -> list:
    return page.resources


def _templates(page: mt.ListResourceTemplatesResult) -> list:
    return page.resourceTemplates
