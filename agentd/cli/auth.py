"""``agentd auth login|status|logout``: OAuth logins for remote MCP servers.

``login NAME`` connects to the declared server NAME (from ``--config`` or
``--mcp``) as a run would, and when the server asks for authorization runs the
authorization code flow in a browser (``$BROWSER`` is honoured; the URL is
also printed), storing the tokens under the state directory.  ``status`` lists
the stored logins (never a token); ``logout NAME`` deletes NAME's.  See
docs/cli.md and docs/security.md.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from agentd.config.model import Config, ServerSpec
from agentd.errors import ConfigError

__all__ = ["auth"]

_SHARED = ("config_file", "mcp", "secrets_dir", "state_dir")


def _flags(ctx: click.Context, local: dict[str, Any]) -> dict[str, Any]:
    """The root flags with this command's own over them (either place works)."""
    from agentd.cli.flags import over_root

    return over_root(ctx.find_root().obj or {}, local, _SHARED)


def _setup(ctx: click.Context, local: dict[str, Any]) -> tuple[Config, dict]:
    from agentd import log as _log
    from agentd.cli.flags import config_from_flags
    from agentd.mcp.client import oauth

    flags = _flags(ctx, local)
    config = config_from_flags(flags, needs_instruction=False)
    # quiet by default (a person is reading): --log-level / AGENTD_LOG_LEVEL shows more
    _log.configure(fmt=config.log_format, level=config.log_level or "warning")
    oauth.configure(state_dir=config.state_dir)
    return config, flags


def _spec(config: Config, name: str) -> ServerSpec:
    spec = config.server(name)
    if spec is None:
        raise ConfigError(f"no MCP server named {name!r} (declare it with --mcp "
                          f"{name}=<endpoint> or in --config)")
    return spec


def _common(fn):
    fn = click.option("--config", "config_file", metavar="FILE",
                      help="TOML config file declaring the servers")(fn)
    fn = click.option("--mcp", multiple=True, metavar="name=<endpoint>",
                      help="declare a server (repeatable)")(fn)
    fn = click.option("--state-dir", metavar="DIR",
                      help="where OAuth tokens are stored  [default: $AGENTD_STATE_DIR, "
                           "else $XDG_STATE_HOME/agentd, else ~/.local/state/agentd]")(fn)
    fn = click.option("--secrets-dir", metavar="DIR",
                      help="where {{secret:NAME}} files live")(fn)
    return fn


@click.group("auth", context_settings={"help_option_names": ["-h", "--help"]})
def auth() -> None:
    """OAuth logins for remote MCP servers (tokens under --state-dir)."""


@auth.command("login")
@click.argument("name")
@_common
@click.option("--no-browser", is_flag=True, help="only print the authorization URL")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="seconds to finish the login in the browser")
@click.pass_context
def login(ctx: click.Context, name: str, no_browser: bool, timeout: float,
          **local: Any) -> None:
    """Log in to the MCP server NAME (authorization code + PKCE in a browser)."""
    from agentd import runtime

    config, _ = _setup(ctx, local)
    spec = _spec(config, name)
    if spec.auth is not None and spec.auth.type == "client_credentials":
        click.echo(f"agentd: {name} uses client_credentials: no login is needed")
        ctx.exit(0)
    if timeout <= 0:
        raise ConfigError("--timeout must be positive")
    ctx.exit(runtime.run(_login(config, spec, open_browser=not no_browser, limit=timeout)))


async def _login(config: Config, spec: ServerSpec, *, open_browser: bool,
                 limit: float) -> int:
    from agentd.config.endpoints import resolve_headers
    from agentd.errors import HandshakeError
    from agentd.mcp.client.facade import MCPClient
    from agentd.mcp.client.oauth import auth_for, configure

    configure(open_browser=open_browser, login_timeout=limit)
    try:
        headers = resolve_headers(spec, config.secrets_dir)
    except ConfigError as exc:
        print(f"agentd: error: {exc}", file=sys.stderr)
        return 2
    auth = auth_for(spec, config.secrets_dir, headers, force_login=True, interactive=True)
    if auth is None:
        print(f"agentd: error: {spec.name} sends a configured Authorization header; "
              "OAuth is not used for it", file=sys.stderr)
        return 2
    client = MCPClient(spec, run_id="auth-login", init_timeout=config.init_timeout,
                       ping_interval=None, secrets_dir=config.secrets_dir)
    client.auth = auth
    try:
        async with client:
            pass
    except HandshakeError as exc:
        print(f"agentd: error: {exc}", file=sys.stderr)
        return 1
    rec = auth.record
    if rec is None:
        print(f"agentd: {spec.name} did not ask for authorization: nothing stored")
        return 0
    print(f"agentd: logged in to {spec.name} (issuer {rec.issuer}, resource {rec.resource}"
          + (f", scope {rec.scope}" if rec.scope else "") + f"; {_expiry(rec.expires_at)})")
    return 0


def _expiry(expires_at: float | None) -> str:
    if expires_at is None:
        return "no expiry given"
    left = int(expires_at - time.time())
    return f"expires in {left}s" if left > 0 else f"expired {-left}s ago"


@auth.command("status")
@_common
@click.option("--json", "as_json", is_flag=True, help="one JSON object per login")
@click.pass_context
def status(ctx: click.Context, as_json: bool, **local: Any) -> None:
    """List the stored logins (never a token)."""
    import orjson

    from agentd.mcp.client.oauth.discovery import canonical_resource
    from agentd.mcp.client.oauth.store import TokenStore

    config, _ = _setup(ctx, local)
    names = {canonical_resource(s.url): s.name for s in config.mcp}
    store = TokenStore(config.state_dir)
    logins = store.tokens()
    if not logins and not as_json:
        click.echo(f"agentd: no stored logins in {store.root}")
    for rec in logins:
        row = {"server": names.get(rec.server), "url": rec.server, "issuer": rec.issuer,
               "resource": rec.resource, "scope": rec.scope, "expires_at": rec.expires_at,
               "refresh_token": bool(rec.refresh_token), "client_id": rec.client_id}
        if as_json:
            click.echo(orjson.dumps(row).decode())
        else:
            click.echo(f"{row['server'] or '-'}  {rec.server}  issuer={rec.issuer}  "
                       f"scope={rec.scope or '-'}  {_expiry(rec.expires_at)}  "
                       f"refresh={'yes' if rec.refresh_token else 'no'}")


@auth.command("logout")
@click.argument("name")
@_common
@click.pass_context
def logout(ctx: click.Context, name: str, **local: Any) -> None:
    """Delete the stored login(s) of the MCP server NAME."""
    from agentd.mcp.client.oauth.discovery import canonical_resource
    from agentd.mcp.client.oauth.store import TokenStore

    config, _ = _setup(ctx, local)
    spec = _spec(config, name)
    url = canonical_resource(spec.url)
    store = TokenStore(config.state_dir)
    gone = [rec for rec in store.tokens() if rec.server == url
            and store.delete_token(rec.issuer, rec.resource)]
    click.echo(f"agentd: {name}: {len(gone)} stored login(s) removed")
