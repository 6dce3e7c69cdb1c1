"""Where profiles live: a local path, or a URL of any filesystem fsspec reaches.

A logdir or profile may be ``gs://bucket/logs``, ``s3://…``, ``az://…``, ``hdfs://…`` or any
other fsspec URL. :func:`as_path` turns what the user gave into one object with pathlib's
interface: a ``pathlib.Path`` for a local name (and ``file://`` URLs), a ``UPath``
(universal-pathlib) for a URL. The layout code, the readers and the writers then use that
object alone, so a URL is never taken apart as a local name (``Path("gs://b/x")`` is the
local folder ``gs:/b/x``: a profile silently written to the wrong place).

A URL whose filesystem package is missing is one :class:`~stepscope.errors.StorageError`
naming the package and stepscope's extra that installs it, raised before anything is recorded
or read.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from stepscope.errors import ProfileFormatError, StorageError

# A scheme and "://": what makes a name a URL rather than a local path (C:\ is a path).
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+)://")

# The stepscope extra that installs each common filesystem's package.
EXTRAS = {"gs": "gcs", "gcs": "gcs", "s3": "s3", "s3a": "s3", "az": "azure", "abfs": "azure",
          "abfss": "azure", "adl": "azure", "hdfs": "hdfs"}
_PACKAGES = {"gcs": "gcsfs", "s3": "s3fs", "azure": "adlfs", "hdfs": "pyarrow"}

# Object stores write an object whole: it appears under its name complete or not at all.
WHOLE_OBJECT_PROTOCOLS = frozenset({"gs", "gcs", "s3", "s3a", "az", "abfs", "abfss", "adl",
                                    "memory"})

# How long a remote filesystem may take to give its first answer (does the logdir exist, what
# does it hold) before we say it cannot be reached, and how long the write of a profile at
# ``stop()`` may take before a local copy is kept instead (docs/reliability.md). A filesystem
# package's own retries (gcsfs: about a minute on a DNS failure) are cut short by these.
REACH_TIMEOUT_ENV = "STEPSCOPE_STORAGE_TIMEOUT_S"
WRITE_TIMEOUT_ENV = "STEPSCOPE_UPLOAD_TIMEOUT_S"
DEFAULT_REACH_TIMEOUT_S = 15.0
DEFAULT_WRITE_TIMEOUT_S = 120.0

# user:password@ (or a key:secret@) in a URL: never repeated in a message.
_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")

T = TypeVar("T")

# A pathlib.Path, or a upath.UPath: not a Path subclass, but with the same interface (the
# methods the layout, readers and writers use), so it is typed as one.
AnyPath = Path


def redact(text: str) -> str:
    """``text`` with any credentials written into a URL (``s3://KEY:SECRET@bucket``) hidden."""
    return _CREDENTIALS.sub(r"\g<scheme>***@", text)


def timeout_s(env: str, default: float) -> float:
    """Seconds from the environment variable ``env`` (a positive number), else ``default``."""
    try:
        value = float(os.environ.get(env, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def call_bounded(fn: Callable[[], T], timeout: float, what: str) -> T:
    """``fn()``, or TimeoutError (an OSError) when it has not answered within ``timeout``
    seconds. Run in a daemon thread, so a filesystem that never answers (an unreachable
    bucket, a dropped connection) holds up neither the caller nor the interpreter's exit."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller as it is
            outcome["error"] = err

    thread = threading.Thread(target=run, name="stepscope-storage", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"{redact(what)} gave no answer within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return cast(T, outcome["value"])


def reachable_exists(path: AnyPath) -> bool:
    """``path.exists()``; for a URL, bounded by the reach timeout, and a failure to reach it
    is a StorageError naming the URL (without credentials) and the reason."""
    if not is_remote(path):
        return path.exists()
    limit = timeout_s(REACH_TIMEOUT_ENV, DEFAULT_REACH_TIMEOUT_S)
    try:
        return call_bounded(path.exists, limit, str(path))
    except Exception as err:  # a filesystem's own error (network, credentials) or the timeout
        raise StorageError(f"Cannot reach {redact(str(path))} ({failure_reason(err)}); check "
                           f"the network and credentials (the wait is {limit:g} s, set by "
                           f"{REACH_TIMEOUT_ENV}).") from err


def failure_reason(err: BaseException) -> str:
    """One short line saying why a filesystem call failed, credentials left out."""
    if isinstance(err, OSError) and err.strerror and not isinstance(err, TimeoutError):
        text = err.strerror
    else:
        text = str(err) or type(err).__name__
        if not isinstance(err, OSError):
            text = f"{type(err).__name__}: {text}"
    line = redact(text.strip().splitlines()[0] if text.strip() else type(err).__name__)
    return line if len(line) <= 300 else line[:297] + "..."


def url_scheme(name: str | os.PathLike[str]) -> str | None:
    """The scheme of a URL (``gs``, ``s3``, …), or None for a local path."""
    if isinstance(name, Path):
        return None
    match = _URL.match(os.fspath(name))
    return match.group("scheme").lower() if match else None


def is_remote(path: Any) -> bool:
    """Whether ``path`` (a name or what :func:`as_path` returned) is not on the local disk."""
    if isinstance(path, Path):
        return False
    protocol = getattr(path, "protocol", None)
    if protocol is not None:
        return protocol not in ("", "file", "local")
    scheme = url_scheme(path)
    return scheme is not None and scheme not in ("file", "local")


def as_path(name: str | os.PathLike[str] | Any) -> AnyPath:
    """``name`` as a path object: ``pathlib.Path`` for local names, ``UPath`` for URLs.

    Raises StorageError when the URL's filesystem cannot be used (its package missing, or a
    scheme fsspec does not know).
    """
    if isinstance(name, Path) or (hasattr(name, "protocol") and hasattr(name, "fs")):
        return cast(Path, name)  # already one of ours
    text = os.fspath(name)
    scheme = url_scheme(text)
    if scheme is None:
        _refuse_unknown_url_forms(text)
        return Path(text)
    if scheme in ("file", "local"):
        return Path(_URL.sub("", text, count=1) or "/")
    # Schemes are case-insensitive (RFC 3986); fsspec knows only the lower-case names.
    text = scheme + text[len(scheme):]
    _check_filesystem(scheme, text)
    from upath import UPath

    return cast(Path, UPath(text))


def _refuse_unknown_url_forms(text: str) -> None:
    """StorageError for a name that looks like a URL but is not one we can open whole:
    fsspec's chained URLs (``simplecache::gs://…``) and anything else holding ``://`` after
    something that is not a scheme. Taken as a local path, such a name would write a folder
    named ``simplecache::memory:`` in the current directory."""
    if "::" in text and "://" in text:
        inner = text.rsplit("::", 1)[1]
        raise StorageError(f"{redact(text)} is an fsspec chained URL, which stepscope does not "
                           f"open; name the storage itself ({redact(inner)}) or a local path.")
    if "://" in text:
        raise StorageError(f"{redact(text)} is neither a local path nor a URL stepscope can "
                           "open; use a local path or a URL such as gs://, s3://, az:// or "
                           "hdfs://.")


def _check_filesystem(scheme: str, url: str) -> None:
    """Raise StorageError unless fsspec can open ``scheme`` URLs here."""
    try:
        import fsspec
    except ImportError as err:  # pragma: no cover - fsspec is a dependency
        raise StorageError(f"{redact(url)} needs fsspec; pip install fsspec.") from err
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as err:
        extra = EXTRAS.get(scheme)
        hint = (f"pip install 'stepscope[{extra}]' (or {_PACKAGES[extra]})" if extra
                else f"install the fsspec package for {scheme}://")
        raise StorageError(f"{redact(url)} is on a filesystem whose package is not installed: "
                           f"{hint}.") from err
    except ValueError as err:
        raise StorageError(f"{redact(url)} names a filesystem that fsspec does not know "
                           f"({scheme}://); use a local path or a URL such as gs://, s3://, "
                           "az:// or hdfs://.") from err


def identity(path: AnyPath) -> list[Any]:
    """What names ``path``'s content as it is now, for cache keys: the resolved local path,
    size and modification time, or the URL, size, modification time and entity tag.
    Raises OSError (FileNotFoundError) when it does not exist."""
    if isinstance(path, Path):
        resolved = path.resolve()
        st = resolved.stat()
        return [str(resolved), st.st_size, st.st_mtime_ns]
    remote: Any = path
    info = remote.fs.info(remote.path)
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("generation")
    mtime = info.get("LastModified") or info.get("updated") or info.get("mtime") or \
        info.get("created")
    return [str(path), int(info.get("size") or 0), str(mtime), str(tag)]


def read_bytes(path: AnyPath) -> bytes:
    """The whole content of a profile file; ProfileFormatError when it cannot be read."""
    try:
        return bytes(path.read_bytes())
    except OSError as err:
        raise ProfileFormatError(f"Cannot read {redact(str(path))} ({failure_reason(err)})."
                                 ) from err
    except Exception as err:  # a remote filesystem's own error (credentials, network)
        raise ProfileFormatError(f"Cannot read {redact(str(path))} ({failure_reason(err)})."
                                 ) from err


def write_remote(path: AnyPath, data: bytes) -> None:
    """Write ``data`` as the object or file ``path`` (a UPath) whole: object stores show a
    new object only once all of it is there; elsewhere a temporary name is renamed. Failures
    are OSError, whatever the filesystem's own exception was."""
    remote: Any = path
    fs = remote.fs
    try:
        if remote.protocol in WHOLE_OBJECT_PROTOCOLS:
            fs.pipe_file(remote.path, data)
            return
        parent = remote.parent.path
        fs.makedirs(parent, exist_ok=True)
        temp = f"{parent}/.{remote.name}.{os.getpid()}.tmp"
        fs.pipe_file(temp, data)
        fs.mv(temp, remote.path)
    except OSError:
        raise
    except Exception as err:  # credentials, network, a refused request
        raise OSError(f"{type(err).__name__}: {err}") from err
