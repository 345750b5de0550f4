"""``agentd batch``: run the samples of a tasks file as one batch (docs/batch.md).

The run flags a batch shares with ``agentd --instruction …`` (the
intelligence, the MCP servers, the per-sample budgets, the drain, logging)
may be given before ``batch`` or after it; the batch's own flags only after.
Everything the command checks (the flags, the tasks file, the results file)
is checked before anything runs: exit 2 with one line on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from agentd import config as cfg

__all__ = ["batch"]

# run flags accepted here as well as before `batch` (the root command's names)
_SHARED = ("config_file", "intelligence", "model", "mcp", "max_steps", "token_ceiling",
           "deadline", "drain_timeout", "max_inflight_intelligence", "spawn",
           "log_format", "log_level", "secrets_dir",
           # the batch's own limits: Config fields, so --config may set them too
           "parallel", "batch_token_ceiling", "progress_interval", "task_line_bytes",
           "max_tasks", "cassette_bytes")


_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group("batch", context_settings=_CONTEXT, invoke_without_command=True)
@click.option("--tasks", metavar="FILE.jsonl",
              help='one task a line: {"id", "instruction", "output_contract"?, "tool_scope"?}'
                   "  [required]")
@click.option("--out", metavar="RESULTS.jsonl",
              help="results, one line per sample, appended as each ends  [required]")
@click.option("--log-file", metavar="FILE",
              help="the batch's log lines (the samples' included) go here; on a terminal "
                   "[default: RESULTS.jsonl.log], only warnings reach the terminal")
@click.option("--parallel", type=int, help="samples in flight at once  [default: 8]")
@click.option("--resume", is_flag=True,
              help="skip the ids --out already holds; run only the rest")
@click.option("--batch-token-ceiling", type=int,
              help="tokens for the whole batch: later calls are refused  [default: none]")
@click.option("--record", metavar="DIR",
              help="write one cassette per sample: its model and MCP traffic, in order")
@click.option("--replay", metavar="DIR",
              help="answer every sample from its cassette in DIR: no network at all")
@click.option("--trajectories", metavar="DIR",
              help="write one ATIF v1.8 trajectory per sample, DIR/<id>.json (live runs "
                   "and replays alike)")
@click.option("--cassette-bytes", type=int,
              help="largest cassette --replay reads  [default: 268435456]")
@click.option("--progress-interval", type=float,
              help="off a terminal: a batch.progress JSON line this often (seconds)  "
                   "[default: 5]")
@click.option("--task-line-bytes", type=int,
              help="longest task line accepted  [default: 1048576]")
@click.option("--max-tasks", type=int, help="most task lines accepted  [default: 100000]")
@click.option("--config", "config_file", metavar="FILE", help="as for a run")
@click.option("--intelligence", metavar="URL|playback:PATH", help="as for a run")
@click.option("--model", help="as for a run")
@click.option("--mcp", "mcp", multiple=True, metavar="name=<endpoint>",
              help="as for a run (repeatable)")
@click.option("--max-steps", type=int, help="per sample  [default: 50]")
@click.option("--token-ceiling", type=int,
              help="per sample (its whole subtree's own count)  [default: none]")
@click.option("--deadline", type=float, help="per sample (seconds)  [default: none]")
@click.option("--drain-timeout", type=float,
              help="bound on the drain at a signal (seconds)  [default: 25]")
@click.option("--max-inflight-intelligence", type=int,
              help="intelligence calls in flight, whole batch  [default: 64]")
@click.option("--spawn", help="forkserver or exec  [default: forkserver on Linux]")
@click.option("--log-format", help="json or text  [default: json]")
@click.option("--log-level", help="debug, info, warning or error  [default: info]")
@click.option("--secrets-dir", metavar="DIR", help="as for a run")
@click.pass_context
def batch(ctx: click.Context, **local: Any) -> None:
    """Run every task of --tasks as an isolated sample (a child of one batch root),
    at most --parallel at once; exit 0 if all completed, 1 if any did not, 2 for
    bad input (before anything runs), 130 if interrupted. `agentd batch report`
    turns a results file into one HTML page."""
    if ctx.invoked_subcommand is not None:
        return
    if not local["tasks"] or not local["out"]:
        raise cfg.ConfigError("agentd batch: --tasks FILE.jsonl and --out RESULTS.jsonl "
                              "are required (or a subcommand: agentd batch report --help)")
    from agentd import log as _log
    from agentd import runtime
    from agentd.app.batch import BatchOptions, run_batch
    from agentd.app.batch_files import ResultsFile, load_tasks, open_regular
    from agentd.flags import check_intelligence, config_from_flags, over_root

    flags = over_root(ctx.find_root().obj or {}, local, _SHARED)
    if flags.get("instruction"):
        raise cfg.ConfigError("agentd batch: the instructions come from --tasks, "
                              "not --instruction")
    config = config_from_flags(flags, needs_instruction=False)
    if config.mode != "task" or config.serve is not None:
        raise cfg.ConfigError("agentd batch: samples run in task mode, without --serve-mcp")
    record, replay = local["record"], local["replay"]
    if record and replay:
        raise cfg.ConfigError("--record and --replay exclude each other")
    if replay:
        if not os.path.isdir(replay):
            raise cfg.ConfigError(f"--replay {replay}: not a directory of cassettes")
    else:
        check_intelligence(config)
    tasks = load_tasks(local["tasks"], line_bytes=config.task_line_bytes,
                       max_tasks=config.max_tasks)
    out = local["out"]
    _log.configure(fmt=config.log_format, level=config.log_level or "info")
    # a regular file no other batch holds (created empty if absent), empty or
    # (--resume) a results file; locked from here until the batch ends
    results = ResultsFile(out, resume=local["resume"])
    log_stream = None
    try:
        # on a terminal the log goes to a file, the terminal shows the progress
        log_file = local["log_file"] or (f"{out}.log" if sys.stderr.isatty() else None)
        if log_file is not None:
            try:
                fd = open_regular(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            except OSError as exc:
                raise cfg.ConfigError(f"--log-file {log_file}: {exc.strerror or exc}") from None
            log_stream = os.fdopen(fd, "a", encoding="utf-8")
            _log.configure(stream=log_stream)
        if record:
            try:
                os.makedirs(record, exist_ok=True)
            except OSError as exc:
                raise cfg.ConfigError(f"--record {record}: {exc.strerror or exc}") from None
        trajectories = local["trajectories"]
        if trajectories:
            try:
                os.makedirs(trajectories, exist_ok=True)
            except OSError as exc:
                raise cfg.ConfigError(f"--trajectories {trajectories}: {exc.strerror or exc}"
                                      ) from None
        opts = BatchOptions(out=out, record=record, replay=replay, trajectories=trajectories,
                            log_file=log_file)
        from agentd.log_bridge import route_stdlib

        route_stdlib()
        code = runtime.run(run_batch(config, opts, tasks, results))
    finally:
        results.close()
        if log_stream is not None:
            _log.configure(stream=sys.stderr)
            log_stream.close()
    ctx.exit(code)


@batch.command("report", context_settings=_CONTEXT)
@click.argument("results", metavar="RESULTS.jsonl")
@click.option("--trajectories", metavar="DIR",
              help="one ATIF trajectory per sample (<id>.json): each shown step by step")
@click.option("--out", required=True, metavar="REPORT.html",
              help="the page to write (replaced if it exists)")
def report(results: str, trajectories: str | None, out: str) -> None:
    """Write one self-contained HTML page of a results file: the summary, a sortable
    table of the samples, each sample's trajectory. Lines that are not result lines
    are named on stderr and in the page; the rest is reported (exit 0)."""
    from agentd.app.batch_report import write_report

    written = write_report(results, out, trajectories)
    for problem in written.problems:
        click.echo(f"agentd batch report: {problem}", err=True)
    click.echo(f"agentd batch report: {len(written.samples)} samples -> {out}", err=True)
