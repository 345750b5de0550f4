"""The journal directory (`--journal DIR`): one SQLite file per run, written off the loop.

Why one file per run: a file that is truncated, corrupt, of another key or
another version costs that run only (it ends failed, saying why) while every
other run resumes; retention is deleting a file. Why SQLite: WAL mode gives an
append with one commit per step, readers that never see half a row, and a
format every operator has a tool for.

Durability rule (docs/operations.md "Durable runs"): every write is its own
transaction with `synchronous=FULL`, committed on a writer thread before its
`await` returns. The tree writes a tool call's `sent` step before the call
is made and every answer before the child is handed it, so a crash (of the
process, or of the machine) loses at most the exchange in flight. Nothing
here runs on the event loop: every open, write, read and delete is a job of
a writer thread: each run has its lane (one of `LANES` threads), so a run's
writes keep their order while other runs' disk syncs proceed beside them.

Trust: the directory is the worker's own, but a file in it is still input.
Every row and the run record carry an HMAC-SHA256 under the journal key (the
pool key with `--pool-key`, else `DIR/key`, made once), the row numbers must
run without a gap, and the file's size is bounded (`journal_run_bytes`) before
anything is read; every decode goes through the guarded entry. A run that
fails any of this is `Broken` with the words of why.

`DIR/lock` is held (`flock`) by the process using the directory: a second one
is refused, naming the holder's pid. `DIR/identity` keeps the journal's id,
which a pool worker mints its handles with, so that a handle names its run
across restarts rather than the process that spawned it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import msgspec

from agentd.child.control import IoAnswer, IoRequest
from agentd.config.model import DEFAULT_JOURNAL_RUN_BYTES
from agentd.errors import ConfigError, TreeError
from agentd.journal.exchange import request_json
from agentd.journal.records import JOURNAL_VERSION, RunRecord, Step
from agentd.log import log, redact
from agentd.wire.guard import PEER_FAULTS, fault_text
from agentd.wire.jsonrpc import ErrorObject

__all__ = ["ID_BYTES", "Broken", "Journal", "Loaded", "RunJournal"]

ID_BYTES: Final = 5  # the journal's id: a pool handle's incarnation (agentd.pool.handles)
KEY_BYTES: Final = 32
MAC_BYTES: Final = 16
SEND: Final = "send"  # a row's kind for a message sent to a warm session
LANES: Final = 4  # writer threads: a run's writes keep their order on one of them
_SLUG: Final = re.compile(r"[^A-Za-z0-9._-]+")
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS steps(seq INTEGER PRIMARY KEY, rel TEXT NOT NULL, "
    "step INTEGER NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL, request TEXT NOT NULL, "
    "answer BLOB NOT NULL, error TEXT, mac BLOB NOT NULL)",
)
T = TypeVar("T")


@dataclass(slots=True)
class Loaded:
    """A run read back whole: its record and its steps by (relative handle, step)."""

    record: RunRecord
    steps: dict[tuple[str, int], Step]
    path: str
    seq: int = 0  # its last row
    size: int = 0  # its file's bytes
    sends: list[str] = field(default_factory=list)  # a warm session's later turns, in order


@dataclass(slots=True)
class Broken:
    """A run file that cannot be trusted or read: the run ends failed with `reason`."""

    name: str
    reason: str
    path: str
    record: RunRecord | None = None


@dataclass(slots=True)
class _Open:
    """One run's open file, touched by its lane's writer thread only."""

    conn: sqlite3.Connection
    path: str
    seq: int = 0
    size: int = 0
    stopped: str | None = None  # why this run is no longer journaled (full, a write failed)


def run_path(directory: str, name: str) -> str:
    """A run's file: a readable slug and a hash of its name (a sample id is
    untrusted text: it never becomes a path of its own)."""
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    slug = _SLUG.sub("_", name)[:64].strip("._") or "run"
    return os.path.join(directory, f"{slug}-{digest}.sqlite")


def _read_small(path: str, limit: int) -> bytes:
    """A small regular file of the directory (never through a link), at most `limit`."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return f.read(limit + 1)[: limit + 1]


def _write_new(path: str, data: bytes) -> None:
    """`data` at `path`, whole or not at all (a temporary file renamed into place)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Journal:
    """The journal directory of one process (see the module doc). `open` it, `load`
    what an earlier process left, `begin` or `reopen` runs, `aclose` at the end."""

    def __init__(self, path: str, *, key: bytes, ident: bytes, lock_fd: int,
                 run_bytes: int) -> None:
        self.path = path
        self.runs_dir = os.path.join(path, "runs")
        self.id = ident
        self.run_bytes = run_bytes
        self._key = key
        self._lock_fd = lock_fd
        # one thread per lane; a run's writes all go to its lane, so they stay in order
        # while runs on other lanes wait for their own disk syncs in parallel
        self._lanes = [ThreadPoolExecutor(1, thread_name_prefix=f"agentd-journal-{i}")
                       for i in range(LANES)]
        self._log = log.bind(component="journal")

    # ------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str, *, key: bytes | None = None,
             run_bytes: int = DEFAULT_JOURNAL_RUN_BYTES) -> Journal:
        """Take the directory (made 0700 if missing): its lock, its id, its key.
        Raises ConfigError (exit 2) naming `--journal` when it cannot be used."""
        try:
            # each level its own call: makedirs gives `mode` to the last level only
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.makedirs(os.path.join(path, "runs"), mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--journal {path}: cannot be made a directory: "
                              f"{exc.strerror or exc}; name a writable directory") from None
        lock_fd = cls._lock(path)
        try:
            ident = cls._identity(path)
            own_key = key if key is not None else cls._own_key(path)
        except OSError as exc:
            os.close(lock_fd)
            raise ConfigError(f"--journal {path}: {exc.strerror or exc}; name a directory "
                              "this user owns and can write") from None
        except ConfigError:
            os.close(lock_fd)
            raise
        return cls(path, key=own_key, ident=ident, lock_fd=lock_fd, run_bytes=run_bytes)

    @staticmethod
    def _lock(path: str) -> int:
        lock = os.path.join(path, "lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ConfigError(f"--journal {path}: its lock file {lock}: "
                              f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(f"--journal {path} is held by pid {holder}: give each worker "
                              "a journal directory of its own") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    @staticmethod
    def _identity(path: str) -> bytes:
        where = os.path.join(path, "identity")
        try:
            text = _read_small(where, 256)
            doc = json.loads(text)
            ident = bytes.fromhex(doc["id"])
            if doc.get("journal") != JOURNAL_VERSION or len(ident) != ID_BYTES:
                raise ValueError("not this version's")
            return ident
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # a new id: the handles minted under the old one read "worker lost"
            log.warning("journal.identity_replaced", path=where, error=str(exc)[:200])
        ident = os.urandom(ID_BYTES)
        _write_new(where, json.dumps({"journal": JOURNAL_VERSION, "id": ident.hex()}).encode())
        return ident

    @staticmethod
    def _own_key(path: str) -> bytes:
        where = os.path.join(path, "key")
        try:
            key = _read_small(where, KEY_BYTES)
        except FileNotFoundError:
            key = os.urandom(KEY_BYTES)
            _write_new(where, key)
            return key
        if len(key) != KEY_BYTES:
            raise ConfigError(f"--journal {path}: its key file {where} is not {KEY_BYTES} "
                              "bytes: remove the directory's runs and key, or restore it")
        return key

    # ------------------------------------------------------------ the thread
    def lane(self, name: str) -> int:
        """The writer lane of the run `name`."""
        return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % LANES

    async def _do(self, job: Callable[[], T], lane: int = 0) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._lanes[lane], job)

    async def aclose(self) -> None:
        """Wait for the writes queued, close the thread, release the lock."""
        for lane in self._lanes:
            await asyncio.get_running_loop().run_in_executor(None, lane.shutdown)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def _mac(self, *parts: str | bytes | int) -> bytes:
        msg = b"\0".join(p if isinstance(p, bytes) else str(p).encode() for p in parts)
        return hmac.new(self._key, msg, hashlib.sha256).digest()[:MAC_BYTES]

    def _key_check(self) -> str:
        return self._mac(b"agentd-journal-key").hex()

    # --------------------------------------------------------------- loading
    async def load(self, *, retention: float | None = None,
                   ended_steps: bool = False) -> list[Loaded | Broken]:
        """Every run an earlier process left, oldest first; a terminal run older than
        `retention` seconds is deleted instead (its retention is over). A terminal
        run's steps are read only with `ended_steps` (a batch replays an ended
        sample whose line was not written); a worker needs only its record, so its
        start does not read every retained run's exchanges."""
        return await self._do(lambda: self._load_all(retention, time.time(), ended_steps))

    def _load_all(self, retention: float | None, now: float,
                  ended_steps: bool) -> list[Loaded | Broken]:
        out: list[Loaded | Broken] = []
        try:
            entries = sorted(os.scandir(self.runs_dir), key=lambda e: e.name)
        except OSError as exc:
            raise ConfigError(f"--journal {self.path}: its runs cannot be listed: "
                              f"{exc.strerror or exc}") from None
        for entry in entries:
            if not entry.name.endswith(".sqlite"):
                continue
            run = self._load_one(entry.path, ended_steps)
            rec = run.record
            if (retention is not None and rec is not None and rec.terminal
                    and (rec.ended_at or 0) + retention < now):
                self._delete(entry.path)
                continue
            out.append(run)
        out.sort(key=lambda r: r.record.started_at if r.record is not None else 0.0)
        return out

    def _load_one(self, path: str, ended_steps: bool) -> Loaded | Broken:
        name = os.path.basename(path).removesuffix(".sqlite")
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return Broken(name, "its journal file is not a regular file", path)
            wal = path + "-wal"
            size = st.st_size + (os.path.getsize(wal) if os.path.exists(wal) else 0)
            if size > self.run_bytes + (1 << 20):
                return Broken(name, f"its journal is {size} bytes, past journal_run_bytes="
                                    f"{self.run_bytes}", path)
            conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None,
                                   check_same_thread=False)
        except OSError as exc:
            return Broken(name, f"its journal cannot be read: {exc.strerror or exc}", path)
        except sqlite3.Error as exc:
            return Broken(name, f"its journal cannot be opened: {exc}", path)
        try:
            return self._read(conn, name, path, size, ended_steps)
        except sqlite3.Error as exc:
            return Broken(name, f"its journal is corrupt or truncated: {exc}", path)
        finally:
            conn.close()

    def _read(self, conn: sqlite3.Connection, name: str, path: str, size: int,
              ended_steps: bool) -> Loaded | Broken:
        meta = {k: v for k, v in conn.execute("SELECT k, v FROM meta").fetchall()
                if isinstance(k, str) and isinstance(v, str)}
        raw = meta.get("run", "")
        try:  # named before it is trusted: a run that cannot be resumed still ends failed
            record: RunRecord | None = msgspec.json.decode(raw, type=RunRecord)
        except PEER_FAULTS:
            record = None
        shown = record.name if record is not None else name
        version = meta.get("version")
        if version != str(JOURNAL_VERSION):
            return Broken(shown, f"its journal is of version {version or 'unknown'}; this "
                                 f"agentd reads version {JOURNAL_VERSION}", path, record)
        if not hmac.compare_digest(meta.get("key", ""), self._key_check()):
            return Broken(shown, "its journal was written under another key (another "
                                 "--pool-key, or another journal directory's key)", path,
                          record)
        try:
            mac = bytes.fromhex(meta.get("run_mac", ""))
        except ValueError:
            mac = b""
        if not hmac.compare_digest(mac, self._mac(b"run", raw)):
            return Broken(shown, "its journal's run record fails its MAC (altered or "
                                 "corrupt)", path, record)
        if record is None:
            return Broken(name, "its run record is not one", path)
        if meta.get("stopped") and not record.terminal:
            return Broken(record.name, f"its journal stopped: {meta['stopped']}", path, record)
        if record.terminal and not ended_steps:  # its record (MAC'd) is all it answers with
            return Loaded(record, {}, path, size=size)
        steps: dict[tuple[str, int], Step] = {}
        sends: list[str] = []
        seq = 0
        for row in conn.execute("SELECT seq, rel, step, kind, state, request, answer, error, "
                                "mac FROM steps ORDER BY seq"):
            n, rel, k, kind, state, request, answer, error, mac = row
            if n != seq + 1:
                return Broken(record.name, f"its journal is truncated: step row {seq + 1} "
                                           "is missing", path, record)
            seq = n
            if not hmac.compare_digest(bytes(mac), self._mac(record.name, n, rel, k, kind,
                                                             state, request, bytes(answer),
                                                             error or "")):
                return Broken(record.name, f"its journal's row {n} fails its MAC (altered "
                                           "or corrupt)", path, record)
            try:
                body = json.loads(request)
                if kind == SEND:
                    sends.append(str(body["message"]))
                    continue
                steps[(rel, k)] = Step(rel, k, kind, state, body, bytes(answer),
                                       json.loads(error) if error else None)
            except (*PEER_FAULTS, KeyError) as exc:
                return Broken(record.name, f"its journal's row {n} is not one: "
                                           f"{fault_text(exc)}", path, record)
        return Loaded(record, steps, path, seq, size, sends)

    # --------------------------------------------------------------- writing
    async def begin(self, record: RunRecord) -> RunJournal:
        """A new run's file (an earlier file of the same name is replaced)."""
        path = run_path(self.runs_dir, record.name)
        opened = await self._guarded(record.name, lambda: self._create(path, record))
        return RunJournal(self, record, opened)

    async def reopen(self, loaded: Loaded) -> RunJournal:
        """A loaded run's file, to go on appending to (a resumed run)."""
        opened = await self._guarded(loaded.record.name, lambda: self._connect(loaded.path))
        opened.seq, opened.size = loaded.seq, loaded.size
        return RunJournal(self, loaded.record, opened)

    async def _guarded(self, name: str, job: Callable[[], _Open]) -> _Open:
        """A run file opened on its lane; a failure is a TreeError naming it."""
        try:
            return await self._do(job, self.lane(name))
        except (OSError, sqlite3.Error) as exc:
            code = getattr(exc, "sqlite_errorname", None)  # SQLite's own word for it
            raise TreeError(f"--journal {self.path}: run {name!r} cannot be journaled: "
                            f"{getattr(exc, 'strerror', None) or exc}"
                            + (f" ({code})" if code else "")) from None

    async def discard(self, path: str) -> None:
        """Delete a run's file (a restored run's, once its retention is over)."""
        await self._do(lambda: self._delete(path))

    async def set_aside(self, path: str) -> None:
        """A file no run can be named from: renamed `*.broken` (kept for the operator,
        never read again)."""
        def job() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, path + ".broken")
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(path + suffix, path + ".broken" + suffix)
        await self._do(job)

    @staticmethod
    def _connect(path: str) -> _Open:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return _Open(conn, path)

    def _create(self, path: str, record: RunRecord) -> _Open:
        self._delete(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        os.close(fd)
        opened = self._connect(path)
        conn = opened.conn
        conn.execute("BEGIN IMMEDIATE")
        for ddl in _SCHEMA:
            conn.execute(ddl)
        conn.executemany("INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", [
            ("version", str(JOURNAL_VERSION)), ("key", self._key_check())])
        opened.size = self._put_record(conn, record, begun=True)
        return opened

    def _put_record(self, conn: sqlite3.Connection, record: RunRecord, *,
                    begun: bool = False) -> int:
        """Write the run record and its MAC in one transaction (a crash leaves
        either both old or both new); its size."""
        raw = self._run_json(record)
        if not begun:
            conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", [
                ("run", raw), ("run_mac", self._mac(b"run", raw).hex())])
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return len(raw)

    @staticmethod
    def _run_json(record: RunRecord) -> str:
        return redact(msgspec.json.encode(record).decode())

    @staticmethod
    def _delete(path: str) -> None:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass
            except OSError as exc:  # left behind, said: the next start retries it
                log.error("journal.delete_failed", path=path + suffix,
                          error=exc.strerror or str(exc))


class RunJournal:
    """One run's journal, written as the run goes (every method awaits its commit)."""

    def __init__(self, journal: Journal, record: RunRecord, opened: _Open) -> None:
        self.journal = journal
        self.record = record
        self._open = opened
        self._lane = journal.lane(record.name)

    @property
    def stopped(self) -> str | None:
        """Why this run is no longer journaled (full, a failed write), if it is not."""
        return self._open.stopped

    async def sent(self, rel: str, step: int, req: IoRequest) -> None:
        """A tool call about to be made."""
        await self._step(rel, step, req, "sent", None)

    async def answered(self, rel: str, step: int, req: IoRequest, answer: IoAnswer) -> None:
        """A request's answer, before the child is handed it."""
        await self._step(rel, step, req, "answered", answer)

    async def message(self, turn: int, message: str) -> None:
        """The `turn`-th message sent to a warm session (sent to it again on resume)."""
        if self._open.stopped is not None:
            return

        def job() -> None:
            body = redact(json.dumps({"message": message}, separators=(",", ":")))
            self._append("", turn, SEND, "answered", body, b"", None)
        await self.journal._do(job, self._lane)

    async def _step(self, rel: str, step: int, req: IoRequest, state: str,
                    answer: IoAnswer | None) -> None:
        if self._open.stopped is not None:
            return

        def job() -> None:  # encoding and scrubbing too: off the event loop
            request = json.dumps(request_json(req), separators=(",", ":"))
            error = body = None
            if isinstance(answer, ErrorObject):
                data = None if answer.data is msgspec.UNSET else answer.data
                error = redact(msgspec.json.encode(
                    {"code": answer.code, "message": answer.message, "data": data}).decode())
            elif answer is not None:
                body = redact(msgspec.json.encode(answer).decode()).encode()
            self._append(rel, step, str(req.__struct_config__.tag), state, request,
                         body or b"", error)
        await self.journal._do(job, self._lane)

    def _append(self, rel: str, step: int, kind: str, state: str, request: str,
                answer: bytes, error: str | None) -> None:
        o = self._open
        size = len(request) + len(answer) + len(error or "") + 64
        if o.size + size > self.journal.run_bytes:
            self._stop(f"it passed journal_run_bytes={self.journal.run_bytes}")
            return
        seq = o.seq + 1
        mac = self.journal._mac(self.record.name, seq, rel, step, kind, state, request,
                                answer, error or "")
        try:
            o.conn.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (seq, rel, step, kind, state, request, answer, error, mac))
        except sqlite3.Error as exc:
            self._stop(f"a write failed: {exc}")
            return
        o.seq, o.size = seq, o.size + size

    def _stop(self, why: str) -> None:
        """This run is journaled no further; its file says so, if it still can."""
        self._open.stopped = why
        self.journal._log.warning("journal.stopped", run=self.record.name, reason=why)
        with contextlib.suppress(sqlite3.Error):
            self._open.conn.execute("INSERT OR REPLACE INTO meta(k, v) VALUES ('stopped', ?)",
                                    (why,))

    async def ended(self, status: str, result: Any, partial: bool,
                    reason: str | None) -> None:
        """The run's terminal state (written even when its steps stopped)."""
        record = msgspec.structs.replace(self.record, status=status, result=result,
                                         partial=partial, reason=reason, ended_at=time.time())
        self.record = record
        await self.journal._do(lambda: self._write_record(record), self._lane)

    def _write_record(self, record: RunRecord) -> None:
        try:
            self.journal._put_record(self._open.conn, record)
        except sqlite3.Error as exc:
            self.journal._log.error("journal.write_failed", run=record.name, error=str(exc))

    async def close(self) -> None:
        """Close the file (it stays: the run is resumed or answered from it later)."""
        await self.journal._do(self._open.conn.close, self._lane)

    async def forget(self) -> None:
        """Retention is over: close and delete the file."""
        def job() -> None:
            self._open.conn.close()
            Journal._delete(self._open.path)
        await self.journal._do(job, self._lane)
