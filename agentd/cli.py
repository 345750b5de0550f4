"""The command line: flags -> one validated, frozen Config -> run.

Every usage or config problem exits 2 with exactly one line on stderr, before
any socket is opened or process started. `--help` groups the flags the way the
spec shows them (TOOLS / MCP, ...).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from agentd import __version__
from agentd import config as cfg
from agentd.exitcodes import EXIT_CODE_HELP, ExitCode

# Help sections, in order; each option names its section via `section=`.
SECTIONS = ("RUN", "INTELLIGENCE", "TOOLS / MCP", "SERVE", "BUDGETS", "SUBAGENTS",
            "REACTIVE", "OUTPUT")


class SectionOption(click.Option):
    def __init__(self, *args: Any, section: str = "OUTPUT", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.section = section


class SectionedGroup(click.Group):
    """A group whose --help lists options under the spec's section headings."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[str, str]]] = {s: [] for s in SECTIONS}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record:
                rows[getattr(param, "section", "OUTPUT")].append(record)
        for section in SECTIONS:
            if rows[section]:
                with formatter.section(section):
                    formatter.write_dl(rows[section])
        self.format_commands(ctx, formatter)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        for line in EXIT_CODE_HELP.splitlines():
            formatter.write_text(line)


def opt(*decls: str, section: str, **kwargs: Any):
    return click.option(*decls, cls=SectionOption, section=section, **kwargs)


def _secs(text: str) -> str:
    return text + " (seconds)"


@click.group(cls=SectionedGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@opt("--instruction", section="RUN", help="the task for this agent (required for a run)")
@opt("--output-contract", section="RUN", help="exactly what the result must be (e.g. a JSON shape)")
@opt("--mode", section="RUN", type=str, help="task (run once) or reactive (wake on --subscribe)  [default: task]")
@opt("--config", "config_file", section="RUN", metavar="FILE",
     help="TOML file: mcp_servers = [{name, url, required, headers}] and any flag by its name")
@opt("--intelligence", section="INTELLIGENCE", metavar="URL|playback:PATH",
     help="OpenAI-compatible gateway base URL (https://…/v1 or loopback http://) or playback:PATH")
@opt("--model", section="INTELLIGENCE", envvar="AGENTD_MODEL", help="model name sent to the gateway  [env: AGENTD_MODEL]")
@opt("--stream/--no-stream", "intelligence_stream", section="INTELLIGENCE", default=None,
     help="stream completions (SSE)  [default: off; env AGENTD_INTELLIGENCE_STREAM]")
@opt("--intelligence-timeout", section="INTELLIGENCE", type=float,
     help=_secs("per-request timeout  [default: 120]"))
@opt("--intelligence-attempts", section="INTELLIGENCE", type=int,
     help="tries per request before exit 5  [default: 5]")
@opt("--mcp", "mcp", section="TOOLS / MCP", multiple=True, metavar="name=<endpoint>",
     help="declare a remote MCP server (repeatable; Streamable HTTP)")
@opt("--init-timeout", section="TOOLS / MCP", type=float, help=_secs("MCP handshake timeout  [default: 10]"))
@opt("--ping-interval", section="TOOLS / MCP", type=float, help=_secs("ping idle MCP connections every  [default: 30]"))
@opt("--serve-mcp", section="SERVE", metavar="<https://host:port>",
     help="serve agentd's own MCP (HTTP(S), mTLS/bearer auth) at path /mcp")
@opt("--serve-cert", section="SERVE", metavar="FILE", help="server certificate (PEM) for https")
@opt("--serve-key", section="SERVE", metavar="FILE", help="server private key (PEM) for https")
@opt("--serve-client-ca", section="SERVE", metavar="FILE", help="CA that client certificates must chain to (mTLS)")
@opt("--serve-bearer", section="SERVE", envvar="AGENTD_SERVE_BEARER", metavar="TOKEN",
     help="bearer token peers must present  [env: AGENTD_SERVE_BEARER]")
@opt("--max-steps", section="BUDGETS", type=int, help="loop steps before a partial result, exit 3  [default: 50]")
@opt("--token-ceiling", section="BUDGETS", type=int, help="tokens for the whole tree before exit 3  [default: none]")
@opt("--deadline", section="BUDGETS", type=float, help=_secs("wall-clock limit for the run, exit 4  [default: none]"))
@opt("--drain-timeout", section="BUDGETS", type=float, help=_secs("bound on the shutdown drain  [default: 25]"))
@opt("--observation-bytes", section="BUDGETS", type=int, help="cut tool observations longer than this  [default: 65536]")
@opt("--max-depth", section="SUBAGENTS", type=int, help="deepest subagent level  [default: 4]")
@opt("--max-children", section="SUBAGENTS", type=int, help="children per agent  [default: 16]")
@opt("--max-subagents", section="SUBAGENTS", type=int, help="subagents in the whole tree  [default: 256]")
@opt("--spawn", section="SUBAGENTS", type=str, help="exec (re-exec per child) or forkserver  [default: exec]")
@opt("--subscribe", section="REACTIVE", multiple=True, metavar="URI",
     help="a concrete resource URI to wake on (repeatable; with --mode reactive)")
@opt("--debounce", section="REACTIVE", type=float, help=_secs("wake debounce window  [default: 0.05]"))
@opt("--max-subscriptions", section="REACTIVE", type=int, help="self-subscriptions per run  [default: 64]")
@opt("--log-format", section="OUTPUT", type=str, help="json or text  [default: json]")
@opt("--secrets-dir", section="OUTPUT", metavar="DIR",
     help="where {{secret:NAME}} files live  [default: /run/secrets/agentd]")
@click.version_option(__version__, "--version", prog_name="agentd", message="%(prog)s %(version)s",
                      cls=SectionOption, section="OUTPUT")
@click.pass_context
def cli(ctx: click.Context, **flags: Any) -> None:
    """agentd: an agent whose whole action space arrives over MCP.

    Run: agentd --instruction TEXT --intelligence URL --mcp name=<endpoint> …
    """
    ctx.obj = flags
    if ctx.invoked_subcommand is not None:
        return
    config = config_from_flags(flags)
    from agentd import log as _log
    from agentd import runtime
    from agentd.agent.run import run

    _log.configure(fmt=config.log_format, level=_log.env_level())
    ctx.exit(runtime.run(run(config)))


def config_from_flags(flags: dict[str, Any], *, needs_instruction: bool = True) -> cfg.Config:
    """Merge the config file (if any) and the flags into one frozen Config."""
    flags = dict(flags)
    values: dict[str, Any] = {}
    config_file = flags.pop("config_file", None)
    if config_file:
        values = cfg.load_config_file(config_file)
    servers = list(values.pop("mcp", []))
    servers += [cfg.parse_mcp_flag(v) for v in flags.pop("mcp", ())]
    subscribe = list(values.pop("subscribe", [])) + list(flags.pop("subscribe", ()))
    serve_keys = ("serve_mcp", "serve_cert", "serve_key", "serve_client_ca", "serve_bearer")
    serve = {k: flags.pop(k, None) or values.pop(k, None) for k in serve_keys}
    if serve["serve_bearer"]:
        from agentd.log import register_secret

        register_secret(serve["serve_bearer"])
    if serve["serve_mcp"]:
        values["serve"] = cfg.parse_serve(serve["serve_mcp"], serve["serve_cert"],
                                          serve["serve_key"], serve["serve_client_ca"],
                                          serve["serve_bearer"])
    elif any(serve[k] for k in serve_keys[1:]):
        raise cfg.ConfigError("--serve-cert/--serve-key/--serve-client-ca/--serve-bearer "
                              "need --serve-mcp")
    if flags.get("log_format") not in (None, *cfg.LOG_FORMATS):
        raise cfg.ConfigError(f"--log-format {flags['log_format']!r}: expected json or text")
    values.update({k: v for k, v in flags.items() if v is not None})
    values["mcp"] = servers
    values["subscribe"] = subscribe
    return cfg.build(values, needs_instruction=needs_instruction)


@cli.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def demo_cmd(ctx: click.Context) -> None:
    """Run the embedded default, offline: sample MCP servers on loopback and a
    scripted (playback) agent that lists and calls tools, reads a resource,
    handles a tool error, spawns subagents, wakes on a resource update, and is
    driven by a second agentd over its self-MCP; then prints a readable trace
    (stderr) and the result object (stdout)."""
    from agentd import log as _log
    from agentd import runtime
    from agentd.demo import main as demo_main

    flags = ctx.obj or {}
    _log.configure(fmt=flags.get("log_format") or "text", level=_log.env_level())
    ctx.exit(runtime.run(demo_main()))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: one line on stderr and exit 2 for any usage error."""
    try:
        code = cli.main(args=argv, prog_name="agentd", standalone_mode=False)
    except cfg.ConfigError as exc:
        _usage_line(str(exc))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _usage_line(exc.format_message())
    except click.exceptions.Abort:
        sys.exit(ExitCode.INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


def _usage_line(message: str) -> None:
    sys.stderr.write(f"agentd: error: {' '.join(message.split())}\n")
    sys.exit(ExitCode.USAGE)
