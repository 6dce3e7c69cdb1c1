"""Writing an output file the user named: through a temporary file where that is safe, in
place where the name is a device or a pipe, and to standard output for ``-``.

Every command that writes a file (``--csv``, ``export``, ``timeline -o``) goes through
:func:`open_output`, so they all treat odd destinations alike:

- ``-`` is standard output;
- a symlink is followed: its target is written, the link stays;
- a FIFO, a character device (``/dev/stdout``, ``/dev/null``) or a socket is written in
  place, never replaced by a regular file;
- a directory, or a place that cannot be written, is one clear :class:`OutputError`;
- anything else is written to a temporary file beside it and renamed into place when the
  writing succeeded, so nothing half-written is ever left under the name.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from stepscope.errors import OutputError
from stepscope.formats.xplane_builder import file_mode

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


def _through_temporary(name: str, target: Path) -> Iterator[BinaryIO]:
    try:
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                    suffix=".tmp")
    except OSError as err:
        raise _error(name, err) from err
    try:
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
    return OutputError(f"Cannot write {name} ({err.strerror or err}).")
