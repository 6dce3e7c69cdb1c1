"""Captures started from the web UI's "Capture profile" dialog.

A capture runs ``stepscope.client.trace`` into the served logdir in a background thread; the
page asks for its progress by id until it ends, then opens the new run. One capture runs at a
time per server: a second request while one runs is refused as busy.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.errors import StepscopeError
from stepscope.web.capture_targets import check_targets

MAX_KEPT = 20  # finished captures remembered for their pages


@dataclass
class CaptureJob:
    """One capture: its request, each worker's latest state, and the outcome."""

    id: str
    service_addr: str
    duration_ms: int
    state: str = "running"  # running → done | failed
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    run: str | None = None  # the new run's name, once written
    error: str | None = None
    result: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the page polls."""
        return {"id": self.id, "state": self.state, "service_addr": self.service_addr,
                "duration_ms": self.duration_ms, "workers": self.workers, "run": self.run,
                "error": self.error, "result": self.result}


class CaptureJobs:
    """The captures of one server."""

    def __init__(self, logdir: Path, *, allow_link_local: bool = False) -> None:
        self._logdir = logdir
        self._allow_link_local = allow_link_local
        self._lock = threading.Lock()
        self._jobs: dict[str, CaptureJob] = {}

    def start(self, service_addr: str, duration_ms: int, options: Any,
              attempts: int, is_tpu: bool = False) -> CaptureJob:
        """Start a capture; StepscopeError when the request is invalid or one is running.

        With ``is_tpu``, ``service_addr`` is a Cloud TPU name, resolved to its workers here.
        """
        from stepscope.remote import addresses, client

        if is_tpu:
            workers = addresses.resolve_tpu(service_addr)
            service_addr = ",".join(w.target for w in workers)
        else:
            workers = addresses.parse(service_addr)  # invalid addresses are refused here
        check_targets(workers, self._allow_link_local)  # no link-local or metadata service
        client.check_arguments(duration_ms, options, attempts)
        with self._lock:
            if any(j.state == "running" for j in self._jobs.values()):
                raise CaptureBusyError("A capture is already running; wait for it to finish.")
            job = CaptureJob(secrets.token_hex(8), service_addr, duration_ms,
                             workers={w.name: {"state": "waiting", "attempt": 0, "detail": ""}
                                      for w in workers})
            self._jobs[job.id] = job
            for old in list(self._jobs)[:-MAX_KEPT]:
                if self._jobs[old].state != "running":
                    del self._jobs[old]
        threading.Thread(target=self._run, args=(job, options, attempts), daemon=True,
                         name=f"stepscope-web-capture-{job.id}").start()
        return job

    def get(self, job_id: str) -> CaptureJob | None:
        """The capture with this id, if this server knows it."""
        with self._lock:
            return self._jobs.get(job_id)

    def _run(self, job: CaptureJob, options: Any, attempts: int) -> None:
        from stepscope.remote import client

        def progress(update: Any) -> None:
            job.workers[update.worker] = {"state": update.state, "attempt": update.attempt,
                                          "detail": update.detail}

        try:
            result = client.trace(job.service_addr, self._logdir, job.duration_ms,
                                  options=options, num_tracing_attempts=attempts,
                                  progress=progress)
        except StepscopeError as err:
            job.error, job.state = str(err), "failed"
            return
        except Exception as err:  # the page must learn that the capture ended
            job.error, job.state = f"The capture failed: {err!r}", "failed"
            raise
        job.result = result.to_dict()
        for w in result.workers:
            job.workers[w.worker] = {"state": "done" if w.ok else "failed",
                                     "attempt": w.attempts,
                                     "detail": f"{w.events:,} events" if w.ok else (w.error or "")}
        job.run = result.run_dir.name
        job.state = "done"


class CaptureBusyError(StepscopeError):
    """A capture was asked for while another one runs."""
