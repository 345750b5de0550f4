"""The token store: OAuth credentials on disk, one file per (issuer, resource).

Layout under the state directory (``--state-dir``, env ``AGENTD_STATE_DIR``,
else ``$XDG_STATE_HOME/agentd``, else ``~/.local/state/agentd``)::

    oauth/                     0700
      tokens/<key>.json        0600  one login: issuer, resource, tokens, expiry
      clients/<key>.json       0600  one client registration per issuer

Keys are SHA-256 digests of the issuer (and resource), so a file name says
nothing.  Credentials are keyed by the authorization server's ``issuer``
(MCP 2026-07-28, "Authorization Server Binding"): a registration or a refresh
token from one issuer is never looked up for another.  Writes are atomic
(a 0600 temporary file in the same directory, then ``os.replace``), so a crash
never leaves half a token file, and every secret read or written is registered
with the log's redaction safety net.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path
from typing import Final

import msgspec

from agentd.log import register_secret

__all__ = ["DEFAULT_STATE_ENV", "ClientRecord", "TokenRecord", "TokenStore", "default_state_dir"]

DEFAULT_STATE_ENV: Final = "AGENTD_STATE_DIR"
_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600


def default_state_dir() -> str:
    """``$AGENTD_STATE_DIR``, else ``$XDG_STATE_HOME/agentd``, else ``~/.local/state/agentd``."""
    env = os.environ.get(DEFAULT_STATE_ENV)
    if env:
        return env
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return str(base / "agentd")


class TokenRecord(msgspec.Struct, kw_only=True):
    """One login: what the authorization server ``issuer`` granted for ``resource``."""

    issuer: str
    resource: str
    server: str = ""  # the configured server name it was obtained for (display only)
    access_token: str = msgspec.field(default="", name="access_token")
    token_type: str = "Bearer"
    refresh_token: str | None = None
    expires_at: float | None = None  # unix time; None = the server gave no lifetime
    scope: str | None = None  # granted (or, failing that, requested) scopes
    client_id: str = ""
    obtained_at: float = 0.0

    def __repr__(self) -> str:  # never show a token
        return f"TokenRecord(issuer={self.issuer!r}, resource={self.resource!r})"

    def expires_within(self, seconds: float) -> bool:
        return self.expires_at is not None and self.expires_at - time.time() <= seconds

    def secrets(self) -> None:
        register_secret(self.access_token)
        register_secret(self.refresh_token)


class ClientRecord(msgspec.Struct, kw_only=True):
    """A client registration bound to one authorization server (its ``issuer``)."""

    issuer: str
    client_id: str
    client_secret: str | None = None
    token_endpoint_auth_method: str = "none"
    redirect_uris: list[str] = []
    method: str = "dcr"  # "dcr", "cimd" or "pre-registered"
    registered_at: float = 0.0

    def __repr__(self) -> str:
        return f"ClientRecord(issuer={self.issuer!r}, client_id={self.client_id!r})"


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


class TokenStore:
    """Files under ``<state_dir>/oauth``; see the module docstring."""

    def __init__(self, state_dir: str | None = None) -> None:
        self.root = Path(state_dir or default_state_dir()) / "oauth"

    def _dir(self, kind: str, *, create: bool = True) -> Path:
        path = self.root / kind
        if not create:  # a read makes no directory (most servers never need OAuth)
            return path
        for p in (self.root.parent, self.root, path):
            if not p.exists():
                p.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        for p in (self.root, path):  # ours: never readable by others
            with contextlib.suppress(OSError):
                if p.stat().st_mode & 0o077:
                    p.chmod(_DIR_MODE)
        return path

    def _write(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, _FILE_MODE)
        try:
            os.fchmod(fd, _FILE_MODE)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    @staticmethod
    def _read(path: Path, type_: type) -> object | None:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            return msgspec.json.decode(data, type=type_)
        except msgspec.DecodeError:
            return None  # a damaged file is a missing login, never a crash

    # ------------------------------------------------------------ tokens

    def token_path(self, issuer: str, resource: str, *, create: bool = True) -> Path:
        return self._dir("tokens", create=create) / f"{_key(issuer, resource)}.json"

    def load_token(self, issuer: str, resource: str) -> TokenRecord | None:
        rec = self._read(self.token_path(issuer, resource, create=False), TokenRecord)
        if isinstance(rec, TokenRecord) and rec.issuer == issuer and rec.resource == resource:
            rec.secrets()
            return rec
        return None

    def save_token(self, rec: TokenRecord) -> None:
        rec.secrets()
        self._write(self.token_path(rec.issuer, rec.resource), msgspec.json.encode(rec))

    def delete_token(self, issuer: str, resource: str) -> bool:
        try:
            self.token_path(issuer, resource, create=False).unlink()
            return True
        except FileNotFoundError:
            return False

    def tokens(self) -> list[TokenRecord]:
        """Every stored login (for ``agentd auth status``), secrets registered."""
        out = []
        for path in sorted(self._dir("tokens", create=False).glob("*.json")):
            rec = self._read(path, TokenRecord)
            if isinstance(rec, TokenRecord):
                rec.secrets()
                out.append(rec)
        return out

    def tokens_for(self, resource: str) -> list[TokenRecord]:
        return [t for t in self.tokens() if t.resource == resource]

    # ------------------------------------------------------------ clients

    def client_path(self, issuer: str, *, create: bool = True) -> Path:
        return self._dir("clients", create=create) / f"{_key(issuer)}.json"

    def load_client(self, issuer: str) -> ClientRecord | None:
        rec = self._read(self.client_path(issuer, create=False), ClientRecord)
        if isinstance(rec, ClientRecord) and rec.issuer == issuer:
            register_secret(rec.client_secret)
            return rec
        return None

    def save_client(self, rec: ClientRecord) -> None:
        register_secret(rec.client_secret)
        self._write(self.client_path(rec.issuer), msgspec.json.encode(rec))

    def clients(self) -> list[ClientRecord]:
        """Every stored registration (secrets registered for redaction)."""
        out = []
        for path in sorted(self._dir("clients", create=False).glob("*.json")):
            rec = self._read(path, ClientRecord)
            if isinstance(rec, ClientRecord):
                register_secret(rec.client_secret)
                out.append(rec)
        return out
