"""Writing an output file the user named: through a temporary file where that is safe, in
place where the name is a device or a pipe, and to standard output for ``-``.

Every command that writes a file (``--csv``, ``export``, ``timeline -o``) goes through
:func:`open_output`, so they all treat odd destinations alike:

- ``-`` is standard output;
- a symlink is followed: its target is written, the link stays;
- a FIFO, a character device (``/dev/stdout``, ``/dev/null``) or a socket is written in
  place, never replaced by a regular file;
- a directory, or a place that cannot be written, is one clear :class:`OutputError`;
- a URL (``s3://…``, ``gs://…``) is written to that URL through fsspec, whole, once the
  writing succeeded (bounded by ``STEPSCOPE_UPLOAD_TIMEOUT_S``); a URL form we cannot open
  (``simplecache::…``) is refused, never taken as a local folder named ``s3:``;
- anything else is written to a temporary file beside it and renamed into place when the
  writing succeeded, so nothing half-written is ever left under the name. Temporary files
  that a killed writer left there (its process gone) are removed by the next write.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

from stepscope.errors import OutputError
from stepscope.model import locations

# A temporary file without a process id in its name (written before names carried one) is
# taken as abandoned once it is this old.
_ORPHAN_AGE_S = 3600.0

STDOUT = "-"


@contextlib.contextmanager
def open_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary stream that writes ``path`` (see the module docstring for what it may be)."""
    name = str(path)
    if name == STDOUT:
        stream = sys.stdout.buffer
        yield stream
        stream.flush()
        return
    scheme = locations.url_scheme(name)
    if scheme in ("file", "local"):
        name = str(locations.as_path(name))
    elif scheme is not None or "://" in name:
        yield from _to_url(name)
        return
    target = Path(os.path.realpath(name))
    try:
        st: os.stat_result | None = target.stat()
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise _error(name, err) from err
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"Cannot write {name}: it is a directory; name a file in it.")
    if st is not None and not stat.S_ISREG(st.st_mode):
        yield from _in_place(name, target)
        return
    yield from _through_temporary(name, target)


def write_output(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as :func:`open_output` does."""
    with open_output(path) as out:
        out.write(data)


def _in_place(name: str, target: Path) -> Iterator[BinaryIO]:
    try:
        stream = open(target, "wb")  # noqa: SIM115 - closed below, errors reworded
    except OSError as err:
        raise _error(name, err) from err
    try:
        yield stream
        stream.close()
    except OSError as err:
        raise _error(name, err) from err
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def _to_url(name: str) -> Iterator[BinaryIO]:
    """Write what is written to a local temporary file, then the URL's object whole."""
    url = locations.as_path(name)  # StorageError (one line) for a form we cannot open
    shown = locations.redact(name)
    limit = locations.timeout_s(locations.WRITE_TIMEOUT_ENV, locations.DEFAULT_WRITE_TIMEOUT_S)
    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
        yield cast(BinaryIO, spool)
        spool.seek(0)
        data = spool.read()
    try:
        locations.call_bounded(lambda: locations.write_remote(url, data), limit, shown)
    except Exception as err:  # noqa: BLE001 - the filesystem's own error, or the timeout
        raise OutputError(f"Cannot write {shown} ({locations.failure_reason(err)}).") from err


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove the temporary files that writers of ``target`` killed mid-write left beside it
    (``.NAME.PID.XXXX.tmp`` whose process is gone; older unnumbered ones after an hour)."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(?:(\d+)\.)?[A-Za-z0-9_]+\.tmp$")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        pid = match.group(1)
        try:
            stale = (not _alive(int(pid))) if pid else \
                time.time() - entry.stat(follow_symlinks=False).st_mtime > _ORPHAN_AGE_S
            if stale:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another write of this process, under way
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _through_temporary(name: str, target: Path) -> Iterator[BinaryIO]:
    remove_stale_temporaries(target)
    try:
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{os.getpid()}.",
                                    suffix=".tmp")
    except OSError as err:
        raise _error(name, err) from err
    try:
        from stepscope.formats.xplane_builder import file_mode  # it loads protobuf

        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as stream:
            yield stream
        os.replace(temp, target)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise _error(name, err) from err
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _error(name: str, err: OSError) -> OutputError:
    return OutputError(f"Cannot write {locations.redact(name)} ({err.strerror or err}).")
