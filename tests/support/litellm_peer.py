"""LiteLLM's proxy as a peer: a real OpenAI-compatible gateway agentd can sit behind.

LiteLLM (PyPI `litellm[proxy]`) brings a large dependency tree, so it lives in
a venv of its own under `tests/.venvs/litellm` (gitignored), created once by
the session fixture `litellm_cli` (`python -m venv` with a >= 3.11
interpreter: `$AGENTD_LITELLM_PYTHON`, this one, `python3.13`/`3.12`/`3.11` on
PATH, or pyenv's; then `pip install 'litellm[proxy]' prisma`) and reused while its
proxy imports. Without the venv the tests skip with the reason; under CI=true
they fail (tests/support/peers.py `unavailable`).

`LitellmProxy` starts `litellm --config ... --port P --host 127.0.0.1` with its
output in a file (read back when a test fails) and is ready once
`/health/liveliness` answers 200, polled by `waiting.until` alone. The model
cost map is read from the package (`LITELLM_LOCAL_MODEL_COST_MAP`): the proxy
never reaches the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import aiohttp
import pytest
from peer_venv import PeerVenv
from peers import free_port
from waiting import until

READY_LIMIT = 300.0  # the hang guard of the proxy's start (a large import on a busy machine)
# prisma: LiteLLM 1.108's handler of a refused key imports it (a 500 without it), and
# the `proxy` extra does not bring it
PACKAGES = ("litellm[proxy]", "prisma")
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}


# ready once the proxy imports and its CLI is there
LITELLM = PeerVenv("litellm", PACKAGES,
                   "import os, sys, litellm.proxy.proxy_server, prisma; "
                   "sys.exit(not os.path.exists(os.path.join(os.path.dirname(sys.executable), "
                   "'litellm')))", "LiteLLM's proxy", python_env="AGENTD_LITELLM_PYTHON",
                   env=OFFLINE)


@pytest.fixture(scope="session")
def litellm_cli() -> str:
    """The path of the venv's `litellm` console script (its proxy imports)."""
    return str(LITELLM.ensure() / "bin" / "litellm")


class LitellmProxy:
    """`litellm --config` on a free loopback port, routing `model` to `upstream`
    (an OpenAI-compatible base URL, called with `upstream_key`); `master_key` is
    the bearer the proxy itself asks of its clients. The config is JSON, which
    is YAML too."""

    def __init__(self, cli: str, workdir: Path, *, model: str, upstream: str,
                 upstream_key: str, master_key: str) -> None:
        self.cli = cli
        self.port = free_port()
        self.config = workdir / "litellm.yaml"
        self.log = workdir / "litellm.log"
        self.config.write_text(json.dumps({
            "model_list": [{"model_name": model, "litellm_params": {
                "model": "openai/upstream-model", "api_base": upstream,
                "api_key": upstream_key}}],
            "general_settings": {"master_key": master_key}}))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    async def _live(self, http: aiohttp.ClientSession) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"litellm exited {self.proc.returncode}: {self.output()}")
        try:
            async with http.get(f"http://127.0.0.1:{self.port}/health/liveliness") as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False

    def _spawn(self) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [self.cli, "--config", str(self.config), "--port", str(self.port),
                 "--host", "127.0.0.1"], stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, **OFFLINE}, start_new_session=True)

    async def __aenter__(self) -> LitellmProxy:
        self._spawn()
        try:
            async with aiohttp.ClientSession() as http:
                await until(lambda: self._live(http), limit=READY_LIMIT,
                            what=f"litellm's /health/liveliness on port {self.port}")
        except BaseException:
            self._end(signal.SIGKILL)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._end(signal.SIGTERM)

    def _end(self, sig: int) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
