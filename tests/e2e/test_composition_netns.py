"""Composition across hosts: the worker and the parent agentd in two network
namespaces created here (the project's own test hosts inside the sandbox),
joined by a veth pair with their own 10.x addresses. The worker serves its
self-MCP on its namespace address over HTTPS + bearer (a non-loopback listener
must be authenticated); the parent reaches it by that address, with the test CA.

Where the machine does not allow network namespaces (not root, no `ip`, no
CAP_NET_ADMIN), the test says why and runs the same composition on loopback.
The namespaces are always deleted (which also removes the veth pair).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import warnings

import pytest
from composition import ASYNC_MARK, SYNC_MARK, run_composition

PORT = 8443


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


class TwoHosts:
    """Two namespaces `w` and `p` joined by a veth pair on 10.231.<n>.0/30."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.worker_ns = f"agentd-w-{tag}"
        self.parent_ns = f"agentd-p-{tag}"
        self.veth_w = f"vaw{tag}"
        self.veth_p = f"vap{tag}"
        n = int(tag[:2], 16)
        self.worker_ip = f"10.231.{n}.1"
        self.parent_ip = f"10.231.{n}.2"
        self.created: list[str] = []

    def why_not(self) -> str | None:
        if shutil.which("ip") is None:
            return "the `ip` tool (iproute2) is not installed"
        if hasattr(os, "geteuid") and os.geteuid() != 0:
            return "not root: creating network namespaces needs CAP_SYS_ADMIN/CAP_NET_ADMIN"
        return None

    def up(self) -> None:
        steps = [
            ("netns", "add", self.worker_ns),
            ("netns", "add", self.parent_ns),
            ("link", "add", self.veth_w, "type", "veth", "peer", "name", self.veth_p),
            ("link", "set", self.veth_w, "netns", self.worker_ns),
            ("link", "set", self.veth_p, "netns", self.parent_ns),
            ("-n", self.worker_ns, "addr", "add", f"{self.worker_ip}/30", "dev", self.veth_w),
            ("-n", self.parent_ns, "addr", "add", f"{self.parent_ip}/30", "dev", self.veth_p),
            ("-n", self.worker_ns, "link", "set", self.veth_w, "up"),
            ("-n", self.parent_ns, "link", "set", self.veth_p, "up"),
            ("-n", self.worker_ns, "link", "set", "lo", "up"),
            ("-n", self.parent_ns, "link", "set", "lo", "up"),
        ]
        for step in steps:
            proc = _ip(*step)
            if proc.returncode != 0:
                raise OSError(f"ip {' '.join(step)}: {proc.stderr.strip()}")
            if step[:2] == ("netns", "add"):
                self.created.append(step[2])

    def down(self) -> None:
        for ns in self.created:
            _ip("netns", "del", ns)
        self.created.clear()
        if _ip("link", "show", self.veth_w).returncode == 0:  # never moved: still here
            _ip("link", "del", self.veth_w)

    def prefix(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]


@pytest.fixture
def hosts():
    h = TwoHosts()
    reason = h.why_not()
    if reason is None:
        try:
            h.up()
        except OSError as exc:
            reason = f"network namespaces are not allowed here ({exc})"
    try:
        yield h, reason
    finally:
        h.down()


@pytest.mark.parametrize("subscribe", [False, True], ids=["drive", "drive+subscribe"])
def test_composition_across_network_namespaces(agentd_bin, tmp_path, hosts, subscribe) -> None:
    h, reason = hosts
    if reason is not None:
        warnings.warn(f"running on loopback instead of two network namespaces: {reason}",
                      stacklevel=1)
        out = run_composition(agentd_bin, tmp_path, mtls=False, subscribe=subscribe)
    else:
        # the parent's namespace routes to the worker over the veth, not loopback
        route = _ip("-n", h.parent_ns, "route", "get", h.worker_ip)
        assert route.returncode == 0 and h.veth_p in route.stdout
        out = run_composition(agentd_bin, tmp_path, mtls=False, subscribe=subscribe,
                              host=h.worker_ip, port=PORT,
                              worker_prefix=h.prefix(h.worker_ns),
                              parent_prefix=h.prefix(h.parent_ns))
    res = out["result"]
    assert res["status"] == "completed"
    assert res["result"]["sync"] == SYNC_MARK
    if subscribe:
        assert res["result"]["async"] == ASYNC_MARK
