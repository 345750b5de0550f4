"""Debian's Chromium, headless, driven over the DevTools protocol (a websocket:
aiohttp's client): the report's tests and benchmarks/bench_report.py open a page
in it, click, read the DOM and take screenshots.

Chromium is installed with apt when missing (as tests/pool/test_pool_balancer.py
installs haproxy); when it cannot be had the test skips locally and fails under
CI=true (tests/support/peers.py ``unavailable``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import peers

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--remote-debugging-port=0")
_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")


def chromium_bin() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and shutil.which("apt-get"):
        for cmd in (["apt-get", "install", "-y", "chromium"], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "chromium"]):
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False, timeout=900)
            found = shutil.which("chromium")
            if found:
                break
    if found is None:
        peers.unavailable("chromium is not installed and apt-get could not install it")
    assert found is not None
    return found


class Page:
    """One tab, attached over the browser's websocket (flat session): commands by
    id, and every event kept in `events` in arrival order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, session: str) -> None:
        self.ws = ws
        self.session = session
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._event_seen = asyncio.Event()

    async def pump(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self._waiting:
                self._waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)
                self._event_seen.set()

    async def send(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[n] = fut
        msg: dict[str, Any] = {"id": n, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        await self.ws.send_str(json.dumps(msg))
        answer = await fut
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def event(self, method: str) -> dict[str, Any]:
        """The first event `method` (already arrived or the next one)."""
        while True:
            for e in self.events:
                if e["method"] == method:
                    return e
            self._event_seen.clear()
            await self._event_seen.wait()

    async def js(self, expression: str) -> Any:
        """The value of `expression` in the page (awaited when a promise)."""
        res = await self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                              awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    async def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the middle of `selector`."""
        box = await self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                            " e.scrollIntoView({block: 'center'});"
                            " const r = e.getBoundingClientRect();"
                            " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                            button="left", clickCount=1)

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", format="png",
                               captureBeyondViewport=True)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))

    def problems(self) -> list[str]:
        """Console errors, warnings, uncaught exceptions and dialogs seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning",
                                                                             "assert"):
                out.append(f"console.{p['type']}: {p.get('args')}")
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails')}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')}")
            elif e["method"] == "Page.javascriptDialogOpening":
                out.append(f"dialog: {p.get('message')}")
        return out


@contextlib.asynccontextmanager
async def browser(width: int = 1280, height: int = 900) -> AsyncIterator[Page]:
    """A headless Chromium with one blank tab, its Page, Runtime and Log domains on."""
    exe = chromium_bin()
    with tempfile.TemporaryDirectory(prefix="agentd-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
            "about:blank", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        try:
            assert proc.stderr is not None
            url = None
            while url is None:
                line = await proc.stderr.readline()
                if not line:
                    raise RuntimeError("chromium ended before it listened for DevTools")
                if m := _LISTENING.search(line):
                    url = m.group(1).decode()
            drain = asyncio.create_task(_drain(proc.stderr))
            async with aiohttp.ClientSession() as http, http.ws_connect(
                    url, max_msg_size=256 << 20) as ws:
                page = Page(ws, "")
                pump = asyncio.create_task(page.pump())
                try:
                    targets = await page.send("Target.getTargets", session=False)
                    tab = next(t["targetId"] for t in targets["targetInfos"]
                               if t["type"] == "page")
                    attached = await page.send("Target.attachToTarget", session=False,
                                               targetId=tab, flatten=True)
                    page.session = attached["sessionId"]
                    for domain in ("Page", "Runtime", "Log"):
                        await page.send(f"{domain}.enable")
                    await page.send("Emulation.setDeviceMetricsOverride", width=width,
                                    height=height, deviceScaleFactor=1, mobile=False)
                    yield page
                finally:
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump
            drain.cancel()
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def load(page: Page, url: str) -> None:
    """Navigate and wait for the load event."""
    page.events = [e for e in page.events if e["method"] != "Page.loadEventFired"]
    await page.send("Page.navigate", url=url)
    await page.event("Page.loadEventFired")
