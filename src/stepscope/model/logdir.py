"""The TensorBoard profile logdir layout: ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``."""

from __future__ import annotations

import re
import socket
from datetime import datetime
from pathlib import Path

from stepscope.model import schema

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def profile_root(logdir: str | Path) -> Path:
    """The folder that holds one sub-folder per run."""
    return Path(logdir).joinpath(*schema.PLUGIN_DIR)


def run_name(when: datetime) -> str:
    """A run's folder name, as TensorBoard names them: ``YYYY_MM_DD_HH_MM_SS``."""
    return when.strftime(schema.RUN_NAME_FORMAT)


def new_run_dir(logdir: str | Path, when: datetime) -> Path:
    """A run folder for a profile taken at ``when`` that no earlier profile uses."""
    root = profile_root(logdir)
    base = run_name(when)
    candidate, n = root / base, 1
    while candidate.exists():
        candidate, n = root / f"{base}_{n}", n + 1
    return candidate


def host_file_name(host: str) -> str:
    """The file name of one host's profile in a run folder (unsafe characters replaced)."""
    return _UNSAFE.sub("_", host) + schema.XPLANE_SUFFIX


def local_hostname() -> str:
    """This machine's host name, as used for profile file names."""
    return socket.gethostname() or "localhost"
