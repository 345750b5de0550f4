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
from agentd.cli.acp import acp as acp_command
from agentd.cli.auth import auth as auth_commands
from agentd.cli.batch import JOURNAL_RUN_BYTES_HELP, share_run_flags
from agentd.cli.batch import batch as batch_command
from agentd.cli.flags import check_intelligence, config_from_flags, parse_log_level
from agentd.errors import ConfigError
from agentd.exitcodes import EXIT_CODE_HELP, ExitCode
from agentd.netaddr import is_loopback_host

# Help sections, in order; each option names its section via `section=`.
SECTIONS = ("RUN", "INTELLIGENCE", "TOOLS / MCP", "SERVE", "POOL", "BUDGETS", "SUBAGENTS",
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
            if record:  # click's own (--help) is not a SectionOption: it goes last
                section = param.section if isinstance(param, SectionOption) else "OUTPUT"
                rows[section].append(record)
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


# secrets a flag can carry -> the environment variable that keeps them out of argv
_SECRET_FLAGS = {"serve_bearer": ("--serve-bearer", "AGENTD_SERVE_BEARER"),
                 "pool_key": ("--pool-key", "AGENTD_POOL_KEY"),
                 "metrics_bearer": ("--metrics-bearer", "AGENTD_METRICS_BEARER"),
                 "bearer": ("--bearer", "AGENTD_BEARER")}


def warn_secret_flags(ctx: click.Context) -> None:
    """One startup warning when a secret came on the command line: every local
    user reads it in ``/proc/<pid>/cmdline`` (``ps``); the environment variable or
    a ``--config`` ``{{secret:NAME}}`` reference does not show it.  Names the
    flags, never the values; call once logging is configured."""
    from click.core import ParameterSource

    from agentd.log import log

    given = [pair for name, pair in _SECRET_FLAGS.items()
             if name in ctx.params and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given:
        log.warning("config.secret_on_command_line", flags=[f for f, _ in given],
                    env=[e for _, e in given],
                    fix="visible to every local user in /proc/<pid>/cmdline: set the "
                        "environment variable instead, or a --config file with a "
                        "{{secret:NAME}} reference (docs/cli.md)")


def _secs(text: str) -> str:
    return text + " (seconds)"


@click.group(cls=SectionedGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@opt("--instruction", section="RUN", help="the task for this agent (required for a run)")
@opt("--output-contract", section="RUN", help="exactly what the result must be (e.g. a JSON shape)")
@opt("--self-tools", section="RUN", metavar="all|spawn|none",
     help="agentd's own tools offered to the model: all, the four subagent tools, or "
          "none  [default: all]")
@opt("--tool-images", section="INTELLIGENCE", metavar="parts|text",
     help="images from tools reach the model as image parts, or as text placeholders "
          "(for text-only models)  [default: parts]")
@opt("--mode", section="RUN", type=str, help="task (run once) or reactive (wake on --subscribe)  [default: task]")
@opt("--config", "config_file", section="RUN", metavar="FILE",
     help="TOML file: mcp_servers = [{name, url, required, headers}] and any flag by its name")
@opt("--intelligence", section="INTELLIGENCE", metavar="URL|playback:PATH",
     help="OpenAI-compatible gateway base URL (https://…/v1 or loopback http://) or "
          "playback:PATH  [env: AGENTD_INTELLIGENCE, else OPENAI_BASE_URL]; the gateway's "
          "key: env AGENTD_INTELLIGENCE_KEY, else OPENAI_API_KEY")
@opt("--model", section="INTELLIGENCE",
     help="model name sent to the gateway (required for an http(s) gateway)  "
          "[env: AGENTD_MODEL]")
@opt("--temperature", section="INTELLIGENCE", type=float,
     help="sampling temperature, 0 to 2  [default: the gateway's]")
@opt("--top-p", section="INTELLIGENCE", type=float,
     help="nucleus sampling, 0 to 1  [default: the gateway's]")
@opt("--seed", section="INTELLIGENCE", type=int,
     help="sampling seed, a 64-bit integer  [default: none]")
@opt("--max-tokens", section="INTELLIGENCE", type=int,
     help="tokens per completion, at least 1  [default: the gateway's]")
@opt("--tool-choice", section="INTELLIGENCE", metavar="auto|none|required|TOOL",
     help="which tool the model must call: auto, none, required, or a tool's name as "
          "offered (server__tool)  [default: the gateway's]")
@opt("--parallel-tool-calls/--no-parallel-tool-calls", section="INTELLIGENCE", default=None,
     help="let the model call several tools at once  [default: the gateway's]")
@opt("--model-param", "model_params", section="INTELLIGENCE", metavar="JSON",
     help="a JSON object of provider-specific body fields, e.g. "
          "'{\"reasoning_effort\":\"high\"}' (not messages, tools, model, stream)")
@opt("--stream/--no-stream", "intelligence_stream", section="INTELLIGENCE", default=None,
     help="stream completions (SSE)  [default: off; env AGENTD_INTELLIGENCE_STREAM]")
@opt("--intelligence-timeout", section="INTELLIGENCE", type=float,
     help=_secs("per-request timeout  [default: 120]"))
@opt("--intelligence-attempts", section="INTELLIGENCE", type=int,
     help="tries per request before exit 5  [default: 5]")
@opt("--intelligence-max-bytes", section="INTELLIGENCE", type=int,
     help="a non-streamed completion's body; past it the gateway faults (exit 5)  "
          "[default: 67108864]")
@opt("--mcp", "mcp", section="TOOLS / MCP", multiple=True, metavar="name=<endpoint>",
     help="declare a remote MCP server (repeatable; Streamable HTTP)")
@opt("--features", "features", section="TOOLS / MCP", multiple=True, metavar="NAME[,NAME]",
     help="enable optional features (repeatable): a2a")
@opt("--a2a-peer", "a2a_peer", section="TOOLS / MCP", multiple=True, metavar="name=<endpoint>",
     help="declare an A2A agent to delegate to via a2a.delegate (repeatable; --features a2a)")
@opt("--init-timeout", section="TOOLS / MCP", type=float, help=_secs("MCP handshake timeout  [default: 10]"))
@opt("--ping-interval", section="TOOLS / MCP", type=float, help=_secs("ping idle MCP connections every  [default: 30]"))
@opt("--tool-idle-timeout", section="TOOLS / MCP", type=float,
     help=_secs("end a tool call after this long without a progress notification "
                "(0: never)  [default: 0]"))
@opt("--tool-timeout", section="TOOLS / MCP", type=float,
     help=_secs("end a tool call after this long in all (0: never)  [default: 3600]"))
@opt("--auth-interactive", section="TOOLS / MCP", is_flag=True, default=None,
     help="let a server that needs an OAuth login open a browser during the run  "
          "[default: off: it fails its handshake, naming `agentd auth login NAME`]")
@opt("--state-dir", section="TOOLS / MCP", metavar="DIR",
     help="OAuth token store  [default: $AGENTD_STATE_DIR, else $XDG_STATE_HOME/agentd, "
          "else ~/.local/state/agentd]")
@opt("--serve-mcp", section="SERVE", metavar="<https://host:port>",
     help="serve agentd's own MCP (HTTP(S), mTLS/bearer auth)")
@opt("--serve-cert", section="SERVE", metavar="FILE",
     help="server certificate (PEM) for https  [default: /etc/agentd/tls/server.crt; "
          "env AGENTD_SERVE_CERT]")
@opt("--serve-key", section="SERVE", metavar="FILE",
     help="server private key (PEM) for https  [default: /etc/agentd/tls/server.key; "
          "env AGENTD_SERVE_KEY]")
@opt("--serve-client-ca", section="SERVE", metavar="FILE", help="CA that client certificates must chain to (mTLS)")
@opt("--serve-bearer", section="SERVE", envvar="AGENTD_SERVE_BEARER", metavar="TOKEN",
     help="bearer token peers must present  [env: AGENTD_SERVE_BEARER]")
@opt("--serve-a2a", "serve_a2a", section="SERVE", is_flag=True, default=None,
     help="also serve A2A (Agent Card, SendMessage, ...) on the --serve-mcp listener "
          "(--features a2a)")
@opt("--journal", section="SERVE", metavar="DIR",
     help="journal every served run (batch: every sample) in DIR, so results and running "
          "runs survive a restart (docs/operations.md \"Durable runs\"); unset: runs live "
          "in memory only")
@opt("--journal-run-bytes", section="SERVE", type=int, metavar="N",
     help=JOURNAL_RUN_BYTES_HELP)
@opt("--pool-id", section="POOL", metavar="ID",
     help="join a worker pool under this id (a DNS label)  [default: the host name's "
          "first label]")
@opt("--pool-peer", section="POOL", multiple=True, metavar="ID=URL",
     help="a pool member's --serve-mcp URL as this worker reaches it (repeatable)")
@opt("--pool-dns", section="POOL", metavar="NAME[:PORT]",
     help="discover pool members as the addresses NAME resolves to, every 5 s (a "
          "Kubernetes headless Service; with --pool-peer: the union)  [default PORT: "
          "--serve-mcp's]")
@opt("--pool-dns-interval", section="POOL", type=float, metavar="S",
     help="seconds between resolutions of the --pool-dns name  [default: 5; at most 300]")
@opt("--pool-subscribe-timeout", section="POOL", type=float, metavar="S",
     help="seconds a subscribe or listen waits for the owners of the handles it names "
          "before it is answered  [default: 5; at most 60]")
@opt("--pool-dead-after", section="POOL", type=float, metavar="S",
     help="seconds without a probe's answer before a peer is called dead and its "
          "handles read \"worker lost\"  [default: 9; at most 12]")
@opt("--pool-key", section="POOL", envvar="AGENTD_POOL_KEY", metavar="KEY",
     help="the pool's shared secret (at least 16 bytes; required in pool mode)")
@opt("--metrics-listen", section="SERVE", metavar="HOST:PORT",
     help="serve /metrics, /healthz and /readyz on their own listener (any mode; a "
          "non-loopback one needs --metrics-bearer or --serve-bearer)")
@opt("--metrics-bearer", section="SERVE", envvar="AGENTD_METRICS_BEARER", metavar="TOKEN",
     help="bearer token /metrics on --metrics-listen requires  [default: --serve-bearer; "
          "env: AGENTD_METRICS_BEARER]")
@opt("--max-steps", section="BUDGETS", type=int, help="loop steps before a partial result, exit 3  [default: 50]")
@opt("--token-ceiling", section="BUDGETS", type=int, help="tokens for the whole tree before exit 3  [default: none]")
@opt("--deadline", section="BUDGETS", type=float, help=_secs("wall-clock limit for the run, exit 4  [default: none]"))
@opt("--drain-timeout", section="BUDGETS", type=float, help=_secs("bound on the shutdown drain  [default: 25]"))
@opt("--observation-bytes", section="BUDGETS", type=int, help="cut tool observations longer than this  [default: 65536]")
@opt("--sse-event-bytes", section="BUDGETS", type=int,
     help="one SSE event an MCP server or a streamed completion sends; past it that peer "
          "faults  [default: 67108864]")
@opt("--sse-retry-min-ms", section="BUDGETS", type=int,
     help="a peer's SSE retry: is raised to at least this  [default: 100]")
@opt("--sse-retry-max-ms", section="BUDGETS", type=int,
     help="a peer's SSE retry: is lowered to at most this  [default: 60000]")
@opt("--mcp-max-bytes", section="BUDGETS", type=int,
     help="an MCP server's JSON (not SSE) answer body; past it that server faults  "
          "[default: 67108864]")
@opt("--max-depth", section="SUBAGENTS", type=int, help="deepest subagent level  [default: 4]")
@opt("--max-children", section="SUBAGENTS", type=int, help="children per agent  [default: 16]")
@opt("--max-subagents", section="SUBAGENTS", type=int, help="subagents in the whole tree  [default: 256]")
@opt("--spawn", section="SUBAGENTS", type=str, help="forkserver (fork from a warm template; falls back to exec) or exec (re-exec per child)  [default: forkserver on Linux, else exec]")
@opt("--max-inflight-intelligence", section="SUBAGENTS", type=int, help="intelligence calls in flight at once, for the whole tree  [default: 64]")
@opt("--subscribe", section="REACTIVE", multiple=True, metavar="URI",
     help="a concrete resource URI to wake on (repeatable; with --mode reactive)")
@opt("--debounce", section="REACTIVE", type=float, help=_secs("wake debounce window  [default: 0.05]"))
@opt("--poll-interval", section="REACTIVE", type=float,
     help=_secs("re-read a watched URI its server cannot push updates for this often; "
                "0: refuse it instead (exit 6)  [default: 5]"))
@opt("--wake-on-start", "wake_on_start", section="REACTIVE", is_flag=True, default=None,
     help="run the instruction once at start, before any update (wake 0)  "
          "[config key: wake_on_start]")
@opt("--max-subscriptions", section="REACTIVE", type=int, help="self-subscriptions per run  [default: 64]")
@opt("--trajectory", section="OUTPUT", metavar="FILE",
     help="write the run's ATIF v1.8 trajectory (subagents nested) to FILE at its end, "
          "partial or failed runs too  [config key: trajectory]")
@opt("--log-format", section="OUTPUT", type=str,
     help="auto, json or text: JSON lines for machines, one short line per event for "
          "people  [default: auto: text on a terminal, else json]")
@opt("--log-level", section="OUTPUT", envvar="AGENTD_LOG_LEVEL", type=str,
     help="debug, info, warning or error (children inherit it)  [default: info; env: AGENTD_LOG_LEVEL]")
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
    if config.journal is not None and config.serve is None:
        raise ConfigError("--journal needs --serve-mcp: it journals the runs peers spawn "
                          "there (`agentd batch --journal` journals samples)")
    check_intelligence(config)
    from agentd import log as _log
    from agentd import runtime
    from agentd.app.run import run

    _log.configure(fmt=config.log_format, level=config.log_level or "info")
    warn_secret_flags(ctx)
    from agentd.log_bridge import route_stdlib

    route_stdlib()  # aiohttp's and asyncio's records as agentd lines too
    from agentd.mcp.client import oauth

    oauth.configure(state_dir=config.state_dir, interactive=config.auth_interactive)
    ctx.exit(runtime.run(run(config)))


@cli.command("top", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("url")
@click.option("--bearer", envvar="AGENTD_BEARER", metavar="TOKEN",
              help="bearer token the worker requires  [env: AGENTD_BEARER]")
@click.option("--ca-file", metavar="FILE", help="CA bundle for a private https worker")
@click.option("--client-cert", metavar="FILE", help="client certificate (PEM) for mTLS")
@click.option("--client-key", metavar="FILE", help="its private key (PEM)")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="re-read at least this often (seconds)")
@click.option("--once", is_flag=True, help="print one frame as plain text and exit")
@click.pass_context
def top_cmd(ctx: click.Context, url: str, bearer: str | None, ca_file: str | None,
            client_cert: str | None, client_key: str | None, interval: float,
            once: bool) -> None:
    """Live view of a serving agentd's tree (URL: its --serve-mcp address): handles,
    status, depth, steps, tokens, age and the last event of each, from the
    worker's agent://status (an ordinary MCP client of its self-MCP; Ctrl-C quits).
    The live view needs the `top` extra (rich); --once does not."""
    from urllib.parse import urlsplit

    from agentd import log as _log
    from agentd import runtime
    from agentd.cli.top import run_top

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"agentd top {url!r}: expected http(s)://host:port")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ConfigError(f"agentd top {url!r}: a non-loopback worker must be https://")
    if bool(client_cert) != bool(client_key):
        raise ConfigError("--client-cert and --client-key go together")
    if interval <= 0:
        raise ConfigError("--interval must be positive")
    if not once:
        try:
            import rich  # noqa: F401
        except ImportError:
            raise ConfigError("agentd top: the live view needs rich: "
                              "pip install 'agentd[top]' (or use --once)") from None
    flags = ctx.obj or {}
    _log.configure(fmt=flags.get("log_format") or "auto", level="warning")
    warn_secret_flags(ctx)
    ctx.exit(runtime.run(run_top(url, bearer=bearer, ca_file=ca_file, client_cert=client_cert,
                                 client_key=client_key, interval=interval, once=once)))


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
    level = parse_log_level(flags.get("log_level"))
    _log.configure(fmt=flags.get("log_format") or "text", level=level or "info")
    ctx.exit(runtime.run(demo_main(level=level)))


cli.add_command(auth_commands)  # agentd auth login|status|logout (agentd/cli/auth.py)
cli.add_command(batch_command)  # agentd batch (agentd/cli/batch.py)
cli.add_command(acp_command)  # agentd acp (agentd/cli/acp.py)
share_run_flags(cli.params)  # every run flag after `batch` too


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: one line on stderr and exit 2 for any usage error;
    an unexpected exception is one `run.crashed` log line and exit 1 (its
    traceback only at --log-level debug); Python's warnings are log lines too."""
    from agentd.log_bridge import route_python

    route_python()
    try:
        code = cli.main(args=argv, prog_name="agentd", standalone_mode=False)
    except ConfigError as exc:
        _usage_line(str(exc))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _usage_line(exc.format_message())
    except click.exceptions.Abort:
        sys.exit(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        sys.exit(ExitCode.INTERRUPTED)
    except Exception as exc:  # a bug: one log line and an exit code, never a traceback
        _crashed(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _crashed(exc: Exception) -> None:
    import traceback

    from agentd.log import log

    log.error("run.crashed", error=f"{type(exc).__name__}: {str(exc)[:500]}",
              fix="a bug in agentd: rerun with --log-level debug for the traceback and "
                  "report it")
    log.debug("run.crashed.traceback", traceback="".join(traceback.format_exception(exc)))
    sys.exit(ExitCode.FAILED)


def _usage_line(message: str) -> None:
    sys.stderr.write(f"agentd: error: {' '.join(message.split())}\n")
    sys.exit(ExitCode.USAGE)
