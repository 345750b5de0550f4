"""Pool configurations that could not carry each caller's own principal, refused at start.

A proxied session or relayed call reaches its owner with the caller's
principal as the first worker authenticated it, under the pool key's MAC
(``agentd.pool.link.session_relay``, ``agentd.pool.link.relay``).  Two configurations
defeat that, and :func:`refusal` names them (exit 2, docs/security.md,
"Principals across the pool"):

* a listener that authenticates nobody (loopback http with no bearer and no
  mTLS) in a pool with peers off this host: it has no principal to carry, so
  every caller would reach those peers as the one principal ``anonymous``
  (an all-loopback pool is a developer's machine, as one loopback worker is);
* an mTLS pool whose worker certificate its CA does not accept, below.

In an mTLS pool (``--serve-client-ca``) a worker reaches its peers with its
own ``--serve-cert`` as its client certificate, and each peer checks it
against the pool's one CA -- the same file as this worker's
``--serve-client-ca`` -- while this worker checks the peer's server
certificate against it too (docs/operations.md, "The link over https").  A
certificate that CA does not accept at both ends of TLS (another issuer, an
expired one, a key usage ruling out one end) fails every handshake of the link, so no caller's principal could reach an owner: the
start is refused instead (exit 2) with the reason.

The check is one TLS handshake in memory (two ``ssl.MemoryBIO`` pairs, no
socket), the worker's certificate on both sides, each side verifying the
other against the CA exactly as the link's ends do.
"""

from __future__ import annotations

import ssl
from typing import Final
from urllib.parse import urlsplit

from agentd.netaddr import is_loopback_host

__all__ = ["link_refusal", "refusal"]

_ROUNDS: Final = 16  # handshake flights; a TLS 1.2/1.3 handshake needs fewer than 6


def _pump(src: ssl.SSLObject, out: ssl.MemoryBIO, into: ssl.MemoryBIO) -> bool:
    """One handshake step of ``src``, its bytes (``out``) handed to the other side's
    input (``into``); True: ``src`` has finished its handshake."""
    try:
        src.do_handshake()
        done = True
    except ssl.SSLWantReadError:
        done = False
    data = out.read()
    if data:
        into.write(data)
    return done


def link_refusal(cert: str, key: str, ca: str) -> str | None:
    """Why ``cert`` cannot carry this worker's mTLS pool link under ``ca``; None if it can."""
    try:
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(cert, key)
        server_ctx.load_verify_locations(cafile=ca)
        server_ctx.verify_mode = ssl.CERT_REQUIRED  # a peer asking for our client certificate
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_ctx.check_hostname = False  # the host name is the peer URL's, not known here
        client_ctx.load_cert_chain(cert, key)
        client_ctx.load_verify_locations(cafile=ca)
    except (ssl.SSLError, OSError, ValueError) as exc:
        return f"cannot be loaded ({exc})"
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_side=False)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    try:
        for _ in range(_ROUNDS):
            client_done = _pump(client, c_out, s_in)
            server_done = _pump(server, s_out, c_in)
            if client_done and server_done:
                # TLS 1.3: the server verifies our certificate after the client finished
                client.write(b".")
                _pump(client, c_out, s_in)
                server.read(1)
                return None
    except ssl.SSLCertVerificationError as exc:
        return f"is not accepted by it ({exc.verify_message})"
    except ssl.SSLError as exc:
        return f"is not accepted by it ({exc.reason or exc})"
    return "is not accepted by it (the handshake did not complete)"


def refusal(serve_url: str, authenticated: bool, peers: dict[str, str], dns: bool,
            cert: str | None, key: str | None, client_ca: str | None) -> str | None:
    """Why this worker's pool could not carry each caller's principal (the error,
    naming the flags and the fix), or None.  ``dns``: ``--pool-dns`` may learn
    peers off this host (over https; over http it takes loopback addresses only)."""
    off_host = [pid for pid, url in peers.items()
                if not is_loopback_host(urlsplit(url).hostname or "")]
    if not authenticated and (off_host or dns):
        where = f"--pool-peer {', '.join(off_host)}" if off_host else "--pool-dns"
        return (f"--serve-mcp {serve_url} authenticates no caller, so its peers off this "
                f"host ({where}) would see every caller as one principal: add --serve-bearer "
                "(serve_bearers) or mTLS (--serve-client-ca)")
    why = link_refusal(cert, key, client_ca) if cert and key and client_ca else None
    if why is None:
        return None
    return (f"pool mode over mTLS: --serve-cert {cert} {why} as --serve-client-ca "
            f"{client_ca}, the pool's one CA, which every peer checks this worker's link "
            "against: issue --serve-cert from that CA, for both serverAuth and clientAuth")
