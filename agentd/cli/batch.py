"""``agentd batch``: run the samples of a tasks file as one batch (docs/batch.md).

Every run flag of ``agentd --help`` may be given before ``batch`` or after
it (`share_run_flags` adds the root's flags here, hidden, as the root command
is built); the batch's own flags only after. Everything the command checks
(the flags, the tasks file, the results file) is checked before anything
runs: exit 2 with one line on stderr. ``agentd batch score`` rescores a
finished results file without running anything.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

import click

from agentd.config.model import (
    DEFAULT_JOURNAL_RUN_BYTES,
    DEFAULT_SCORER_TIMEOUT,
    JOURNAL_RUN_BYTES_BOUNDS,
)
from agentd.errors import ConfigError

__all__ = ["JOURNAL_RUN_BYTES_HELP", "batch", "share_run_flags"]

# run flags accepted here as well as before `batch` (the root command's names)
_SHARED = ("config_file", "intelligence", "model", "mcp", "max_steps", "token_ceiling",
           "deadline", "drain_timeout", "max_inflight_intelligence", "spawn",
           "log_format", "log_level", "secrets_dir",
           # the batch's own limits: Config fields, so --config may set them too
           "parallel", "batch_token_ceiling", "progress_interval", "task_line_bytes",
           "max_tasks", "cassette_bytes",
           # the journal: one key for a served run's and a sample's (docs/cli.md)
           "journal", "journal_run_bytes")

# --journal-run-bytes, here and on the root command (one bound, one text)
JOURNAL_RUN_BYTES_HELP = ("the largest journal file of one run (batch: of one sample); past it "
                          "that run is no longer journaled and cannot be resumed  "
                          f"[default: {DEFAULT_JOURNAL_RUN_BYTES}; "
                          f"{JOURNAL_RUN_BYTES_BOUNDS[0]} to {JOURNAL_RUN_BYTES_BOUNDS[1]}]")


_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

EXIT_HELP = """\b
Exit codes (the final state of every selected sample's line in --out):
  0    every sample completed (and met its output_contract when agentd can check it)
  1    some sample failed (its own outcome: failed, budget, deadline, contract broken)
  2    bad usage or input (before anything runs)
  5    some sample ended in `error` (an infrastructure fault): --resume runs it again;
       or the intelligence failed before any sample
  6    a required MCP server failed its handshake, before any sample ran
  130  interrupted (drained; --resume runs the rest)"""


@click.group("batch", invoke_without_command=True, epilog=EXIT_HELP, context_settings=_CONTEXT)
@click.option("--tasks", metavar="FILE.jsonl",
              help='one task a line: {"id", "instruction", "output_contract"?, "tool_scope"?, '
                   '"target"?, "metadata"?}  [required]')
@click.option("--out", metavar="RESULTS.jsonl",
              help="results, one line per sample and epoch, appended as each ends  [required]")
@click.option("--log-file", metavar="FILE",
              help="the batch's log lines (the samples' included) go here; on a terminal "
                   "[default: RESULTS.jsonl.log], only warnings reach the terminal")
@click.option("--parallel", type=int, help="samples in flight at once  [default: 8]")
@click.option("--resume", is_flag=True,
              help="skip the samples --out already ended; run the rest and those that "
                   "ended in `error` again")
@click.option("--retry-failed", is_flag=True,
              help="with --resume: run the samples that ended `failed` again too")
@click.option("--retry-errors", type=int, default=0, show_default=True, metavar="N",
              help="run a sample that ended in `error` again, up to N times, within the run")
@click.option("--epochs", type=int, default=1, show_default=True, metavar="N",
              help="run each sample N times (result lines carry `epoch`, the id unchanged)")
@click.option("--limit", type=int, metavar="N", help="only the first N (selected) tasks")
@click.option("--sample", "sample_ids", multiple=True, metavar="ID",
              help="only the task of this id (repeatable)")
@click.option("--scorer", "scorers", multiple=True, metavar="NAME|command:CMD",
              help="score each result: exact, includes, regex, json, schema, or command:CMD "
                   "(argv, no shell; reads JSON on stdin, prints {\"reward\": 1.0}) "
                   "(repeatable)")
@click.option("--scorer-timeout", type=float, metavar="S",
              help=f"a command scorer's time per sample  [default: {DEFAULT_SCORER_TIMEOUT:g}]")
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
@click.option("--journal", metavar="DIR",
              help="journal every sample in DIR, so --resume resumes an interrupted sample "
                   "from its journal instead of re-running it (docs/operations.md \"Durable "
                   "runs\"); unset: samples live in memory only")
@click.option("--journal-run-bytes", type=int, metavar="N",
              help=JOURNAL_RUN_BYTES_HELP)
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
    at most --parallel at once, each --epochs times, scored by each --scorer.
    Every run flag of `agentd --help` is accepted here too (docs/batch.md).
    `agentd batch report` turns a results file into one HTML page; `agentd batch
    score` rescores one."""
    if ctx.invoked_subcommand is not None:
        return
    if not local["tasks"] or not local["out"]:
        raise ConfigError("agentd batch: --tasks FILE.jsonl and --out RESULTS.jsonl "
                          "are required (or a subcommand: agentd batch report --help)")
    from agentd import log as _log
    from agentd import runtime
    from agentd.batch.files import ResultsFile, load_tasks, open_regular
    from agentd.batch.runner import BatchOptions, run_batch
    from agentd.cli.flags import check_intelligence, config_from_flags, over_root

    for name in ("tasks", "out"):
        if not local[name]:
            raise ConfigError(f"agentd batch: --{name} is required (agentd batch --help)")
    flags = over_root(ctx.find_root().obj or {}, local, _SHARED + tuple(_ROOT_ONLY))
    if flags.get("instruction"):
        raise ConfigError("agentd batch: the instructions come from --tasks, "
                          "not --instruction")
    config = config_from_flags(flags, needs_instruction=False)
    if config.mode != "task" or config.serve is not None:
        raise ConfigError("agentd batch: samples run in task mode, without --serve-mcp")
    record, replay = local["record"], local["replay"]
    if record and replay:
        raise ConfigError("--record and --replay exclude each other")
    if replay and config.journal is not None:
        raise ConfigError("--journal and --replay exclude each other: a replay spends "
                          "nothing and is run again whole; drop --journal (or the config "
                          "key `journal`)")
    if replay:
        if not os.path.isdir(replay):
            raise ConfigError(f"--replay {replay}: not a directory of cassettes")
    else:
        check_intelligence(config)
    for name in ("epochs", "retry_errors", "limit"):
        value, least = local[name], 0 if name != "epochs" else 1
        if value is not None and value < least:
            raise ConfigError(f"--{name.replace('_', '-')} {value}: at least {least}")
    if local["retry_failed"] and not local["resume"]:
        raise ConfigError("--retry-failed needs --resume (it re-runs failed lines of --out)")
    scorers, timeout = _scorers(local)
    tasks = select(load_tasks(local["tasks"], line_bytes=config.task_line_bytes,
                              max_tasks=config.max_tasks),
                   local["tasks"], local["sample_ids"], local["limit"])
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
                raise ConfigError(f"--log-file {log_file}: {exc.strerror or exc}") from None
            log_stream = os.fdopen(fd, "a", encoding="utf-8")
            _log.configure(stream=log_stream)
        if record:
            try:
                os.makedirs(record, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"--record {record}: {exc.strerror or exc}") from None
        trajectories = local["trajectories"]
        if trajectories:
            try:
                os.makedirs(trajectories, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"--trajectories {trajectories}: {exc.strerror or exc}"
                                  ) from None
        opts = BatchOptions(out=out, record=record, replay=replay, trajectories=trajectories,
                            log_file=log_file, epochs=local["epochs"],
                            scorers=scorers, scorer_timeout=timeout,
                            retry_errors=local["retry_errors"],
                            retry_failed=local["retry_failed"], resume=local["resume"])
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
    are named in the log (`batch.report.skipped`) and in the page; the rest is
    reported (`batch.report.written`, exit 0)."""
    from agentd import log as _log
    from agentd.batch.report import write_report

    _log.configure(level="info")
    written = write_report(results, out, trajectories)
    for problem in written.problems:
        _log.log.warning("batch.report.skipped", problem=problem)
    _log.log.info("batch.report.written", samples=len(written.samples), out=out)


def _scorers(local: dict[str, Any]) -> tuple[tuple[Any, ...], float]:
    """The parsed --scorer values and --scorer-timeout (ConfigError for a bad one)."""
    from agentd.batch.score import parse_scorer

    scorers = tuple(parse_scorer(s) for s in local["scorers"])
    timeout = local["scorer_timeout"]
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"--scorer-timeout {timeout}: must be positive (seconds)")
    return scorers, DEFAULT_SCORER_TIMEOUT if timeout is None else timeout


def select(tasks: list[Any], path: str, ids: tuple[str, ...], limit: int | None) -> list[Any]:
    """--sample's tasks (each must exist), in file order; then the first --limit."""
    if ids:
        known = {t.id for t in tasks}
        missing = [i for i in ids if i not in known]
        if missing:
            raise ConfigError(f"--sample {missing[0]!r}: no task of that id in --tasks {path}")
        wanted = set(ids)
        tasks = [t for t in tasks if t.id in wanted]
    return tasks if limit is None else tasks[:limit]


@batch.command("score", context_settings=_CONTEXT)
@click.argument("results_path", metavar="RESULTS.jsonl")
@click.option("--tasks", required=True, metavar="FILE.jsonl",
              help="the batch's tasks file: each line's target, output_contract, metadata")
@click.option("--scorer", "scorers", multiple=True, required=True,
              metavar="NAME|command:CMD", help="as for agentd batch (repeatable)")
@click.option("--scorer-timeout", type=float, metavar="S",
              help=f"a command scorer's time per sample  [default: {DEFAULT_SCORER_TIMEOUT:g}]")
@click.option("--out", metavar="RESCORED.jsonl",
              help="write the rescored lines here (a new file)  [default: only the summary]")
def score_cmd(results_path: str, tasks: str, out: str | None, **local: Any) -> None:
    """Rescore a finished batch (or a replayed one) without running it: the final
    line of each sample and epoch of RESULTS.jsonl, scored afresh by each --scorer
    (the old scores are replaced); prints the summary as one JSON line on stdout.
    Exit 0, or 2 for bad input (a line whose id --tasks lacks) before anything."""
    from agentd import log as _log
    from agentd import runtime
    from agentd.batch.files import ResultsFile, load_tasks, read_results
    from agentd.batch.score import rescore

    scorers, timeout = _scorers(local)
    by_id = {t.id: t for t in load_tasks(tasks)}
    lines = read_results(results_path)
    for line in lines:
        if line.id not in by_id:
            raise ConfigError(f"RESULTS {results_path}: sample {line.id!r} is not in "
                              f"--tasks {tasks}: name the batch's own tasks file")
    _log.configure(fmt="json", level="warning")
    sink = ResultsFile(out, resume=False) if out else None
    try:
        summary = runtime.run(rescore(lines, by_id, scorers, timeout,
                                      sink.write if sink else None))
    finally:
        if sink is not None:
            sink.close()
    sys.stdout.write(summary + "\n")


def share_run_flags(root_params: list[click.Parameter]) -> None:
    """Accept every run flag of the root command after `batch` too: a hidden copy
    of each the batch does not declare itself (called as the root is built)."""
    own = {p.name for p in batch.params}
    for param in root_params:
        if isinstance(param, click.Option) and param.expose_value and param.name not in own:
            shared = copy.copy(param)
            shared.hidden = True
            batch.params.append(shared)
            _ROOT_ONLY.append(str(param.name))


_ROOT_ONLY: list[str] = []  # the root's flags `share_run_flags` added here
