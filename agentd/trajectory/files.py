"""Writing trajectory documents: whole or not at all, never through a planted link.

A document is written to a new temporary file beside its destination (created
with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600: nothing that already exists
there, a symlink included, is opened) and renamed over the destination; a
rename replaces a link at the destination instead of following it, and a
reader never sees half a document.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sample_file(directory: str, sample_id: str) -> str:
    """`<id>.json` for an id that is a safe file name as it is (letters, digits,
    `._-`, not starting with a dot or a dash, at most 100 characters); else a
    readable slug and a hash of the id, so two ids never share a file."""
    if _SAFE.fullmatch(sample_id):
        return os.path.join(directory, f"{sample_id}.json")

    digest = hashlib.sha256(sample_id.encode()).hexdigest()[:16]
    slug = _UNSAFE.sub("_", sample_id)[:64].strip("._-") or "sample"
    return os.path.join(directory, f"{slug}-{digest}.json")


def write_document(path: str, data: bytes) -> None:
    """`data` at `path`, atomically (module doc); an OSError is the caller's."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
