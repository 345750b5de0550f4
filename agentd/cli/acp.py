"""``agentd acp``: agentd as an Agent Client Protocol agent on stdin/stdout (docs/harnesses.md).

The run flags (the intelligence, the operator's MCP servers, the budgets, the
subagent caps, logging) may be given before ``acp`` or after it; they apply to
every prompt of every session.  Everything is checked before the first frame
is read: a bad flag is exit 2 with one line on stderr.
"""

from __future__ import annotations

import os
from typing import Any

import click

from agentd.errors import ConfigError

__all__ = ["acp"]

# run flags accepted here as well as before `acp` (the root command's names)
_SHARED = ("config_file", "intelligence", "model", "mcp", "max_steps", "token_ceiling",
           "deadline", "drain_timeout", "observation_bytes", "max_depth", "max_children",
           "max_subagents", "max_inflight_intelligence", "spawn", "log_format", "log_level",
           "secrets_dir")


@click.command("acp", context_settings={"help_option_names": ["-h", "--help"],
                                        "max_content_width": 100})
@click.option("--max-line-bytes", type=int, metavar="N",
              help="longest ACP frame (one line) read from stdin; a longer one is answered "
                   "with a JSON-RPC error  [default: 16777216]")
@click.option("--trajectories", metavar="DIR",
              help="write each session's ATIF v1.8 trajectory to DIR/<sessionId>.json, "
                   "rewritten after every prompt (created if missing)")
@click.option("--config", "config_file", metavar="FILE", help="as for a run")
@click.option("--intelligence", metavar="URL|playback:PATH",
              help="as for a run  [env fallback: OPENAI_BASE_URL]")
@click.option("--model", help="as for a run; the session's default model")
@click.option("--mcp", "mcp", multiple=True, metavar="name=<endpoint>",
              help="MCP servers every session gets, beside its own (repeatable)")
@click.option("--max-steps", type=int, help="per prompt  [default: 50]")
@click.option("--token-ceiling", type=int, help="per session, its trees' tokens  [default: none]")
@click.option("--deadline", type=float, help="per prompt (seconds)  [default: none]")
@click.option("--drain-timeout", type=float, help="bound on a prompt's drain (seconds)  "
                                                  "[default: 25]")
@click.option("--observation-bytes", type=int, help="as for a run; also the tool output "
                                                    "shown in a tool_call_update")
@click.option("--max-depth", type=int, help="as for a run")
@click.option("--max-children", type=int, help="as for a run")
@click.option("--max-subagents", type=int, help="as for a run (per prompt's tree)")
@click.option("--max-inflight-intelligence", type=int, help="as for a run (per prompt's tree)")
@click.option("--spawn", help="forkserver or exec  [default: forkserver on Linux]")
@click.option("--log-format", help="json or text (on stderr)  [default: json]")
@click.option("--log-level", help="debug, info, warning or error  [default: info]")
@click.option("--secrets-dir", metavar="DIR", help="as for a run")
@click.pass_context
def acp(ctx: click.Context, max_line_bytes: int | None, trajectories: str | None,
        **local: Any) -> None:
    """Speak the Agent Client Protocol (v1) on stdin/stdout: newline-delimited JSON-RPC,
    stdout for protocol frames only, the log on stderr. Each session/prompt runs the
    loop with these flags' limits; exit 0 at end of input or on SIGINT/SIGTERM."""
    from agentd import __version__, runtime
    from agentd import log as _log
    from agentd.acp.framing import DEFAULT_MAX_LINE
    from agentd.acp.stdio import claim_stdout, serve
    from agentd.cli.flags import check_intelligence, config_from_flags, over_root

    flags = over_root(ctx.find_root().obj or {}, local, _SHARED)
    if flags.get("instruction"):
        raise ConfigError("agentd acp: the instructions come from session/prompt, "
                          "not --instruction")
    config = config_from_flags(flags, needs_instruction=False)
    if config.mode != "task" or config.serve is not None or config.subscribe \
            or config.journal is not None:
        raise ConfigError("agentd acp: prompts run in task mode, without --serve-mcp, "
                          "--subscribe or --journal")
    check_intelligence(config)
    max_line = DEFAULT_MAX_LINE if max_line_bytes is None else max_line_bytes
    if max_line < 1024:
        raise ConfigError(f"--max-line-bytes {max_line}: at least 1024")
    if trajectories is not None:
        try:
            os.makedirs(trajectories, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--trajectories {trajectories}: {exc.strerror or exc} "
                              "(give a directory agentd can create and write)") from None
    out_fd = claim_stdout()
    _log.configure(fmt=config.log_format, level=config.log_level or "info")
    from agentd.log_bridge import route_stdlib

    route_stdlib()
    ctx.exit(runtime.run(serve(config, out_fd=out_fd, max_line=max_line,
                               version=__version__, trajectories=trajectories)))
