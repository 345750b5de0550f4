"""One OTLP/HTTP POST at a time on a kept-alive connection, from the exporter thread.

Why not `http.client`: every blocking socket call releases the GIL, and the
exporter thread gets it back only by contending with the event loop, which
(busy serving) then pays a wake-up for every hand-over until the thread wins
it. `http.client` makes a POST several such calls (the head, the body, the
status line, the header parsing); here a POST is one `sendall` of the whole
request and, usually, one `recv` of the whole answer, parsed with a few byte
operations.

What it speaks: HTTP/1.1 requests with a `Content-Length` body; answers with
a `Content-Length` or chunked body, or one that ends with the connection
(which is then closed), after any interim 1xx answers. An answer's head and
body are bounded (`MAX_ANSWER`): a collector's answer is a few bytes.
"""

from __future__ import annotations

import socket
import ssl

__all__ = ["MAX_ANSWER", "Poster"]

MAX_ANSWER = 1 << 20
_CRLF = b"\r\n"


class Poster:
    """POSTs to one `path` on `host:port` (TLS when `ssl_context` is given)."""

    def __init__(self, host: str, port: int, path: str, netloc: str,
                 headers: dict[str, str], ssl_context: ssl.SSLContext | None = None) -> None:
        self._addr = (host, port)
        self._ssl = ssl_context
        lines = [f"POST {path} HTTP/1.1", f"Host: {netloc}"]
        for name, value in headers.items():
            if any(c in name or c in value for c in "\r\n\0") or ":" in name or not name:
                raise ValueError(f"an OTLP header that cannot be sent: {name!r}")
            lines.append(f"{name}: {value}")
        self._head = (_CRLF.join(s.encode("latin-1") for s in lines)
                      + b"\r\nContent-Length: ")  # UnicodeEncodeError is a ValueError
        self._sock: socket.socket | None = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def post(self, body: bytes, timeout: float) -> int:
        """Send `body`, read the whole answer; its status. Raises OSError (ssl
        errors and timeouts included) or ValueError (a malformed answer); the
        connection is closed then, and when the collector asks for it."""
        sock = self._sock
        try:
            if sock is None:
                sock = self._sock = self._connect(timeout)
            else:
                sock.settimeout(timeout)
            sock.sendall(b"%s%d\r\n\r\n%s" % (self._head, len(body), body))
            status, close = _answer(sock)
        except BaseException:
            self.close()
            raise
        if close:
            self.close()
        return status

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection(self._addr, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                return self._ssl.wrap_socket(sock, server_hostname=self._addr[0])
        except BaseException:
            sock.close()
            raise
        return sock


class _Reader:
    """What arrived of an answer, and more of it on demand (bounded)."""

    __slots__ = ("buf", "eof", "sock", "taken")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.taken = 0  # bytes received in all
        self.eof = False

    def more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
            raise ConnectionError("the collector closed the connection")
        self.taken += len(data)
        if self.taken > MAX_ANSWER:
            raise ValueError("the collector's answer is too large")
        self.buf += data

    def line(self) -> bytes:
        while True:
            end = self.buf.find(_CRLF)
            if end >= 0:
                line, self.buf = self.buf[:end], self.buf[end + 2:]
                return line
            self.more()

    def skip(self, n: int) -> None:
        while len(self.buf) < n:
            self.more()
        self.buf = self.buf[n:]


def _answer(sock: socket.socket) -> tuple[int, bool]:
    """(status, close the connection) of the final answer, read whole."""
    r = _Reader(sock)
    while True:
        version, _, rest = r.line().partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise ValueError("not an HTTP/1.x answer")
        status = int(code)
        fields: dict[bytes, bytes] = {}
        while True:
            line = r.line()
            if not line:
                break
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        if status >= 200:
            break  # a 1xx is an interim answer: the final one follows
    close = version == b"HTTP/1.0" or fields.get(b"connection") == b"close"
    if status in (204, 304):
        return status, close
    if b"chunked" in fields.get(b"transfer-encoding", b""):
        while True:
            size = int(r.line().split(b";", 1)[0].strip(), 16)  # ValueError: malformed
            if size < 0:
                raise ValueError("a negative chunk size")
            if size == 0:
                while r.line():  # trailers, then the empty line
                    pass
                return status, close
            r.skip(size + 2)
    length = fields.get(b"content-length")
    if length is not None:
        n = int(length)  # ValueError: malformed
        if n < 0:
            raise ValueError("a negative Content-Length")
        r.skip(n)
        return status, close
    try:  # the body ends with the connection
        while True:
            r.buf = b""
            r.more()
    except ConnectionError:
        pass
    return status, True
