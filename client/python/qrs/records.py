"""Token records out of an engine's worker: one JSON-lines file per
request in a directory ($QRS_RECORDS_DIR), written by a thread of its
own, off the step's critical path.

A file is

    {"qrs_records": 1, "run_id": "...", "writer": "qrs.vllm", "pid": 123}
    {...one libqrs token record per line...}
    {"qrs_records_end": 17, "lost": 0}

The last line is written when the request's slot is taken by the next
request or the writer is closed; a file without it was cut short (the
process died), and ``qrs-audit --records`` reports it truncated, never
intact.  "lost" counts records the writer could not keep: the queue to
its thread is bounded (a step never waits for the disk), and a record
that does not fit is dropped and counted, so the audit reports the file
incomplete."""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import queue
import re
import threading
from collections.abc import Iterable
from typing import Any

from .errors import ConfigError

log = logging.getLogger(__name__)

#: Records (and file openings and closings) the writer's queue holds.
QUEUE_MAX = 65536

#: What a run id may be: a file name's stem, never a path.
RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}\Z")

_counter = itertools.count(1)


def check_run_id(value: Any) -> str:
    """value as a run id, or ValueError saying what one may be."""
    if not isinstance(value, str) or not RUN_ID.match(value):
        raise ValueError(f"qr_run_id: {value!r} is not a run id (1 to 100 "
                         "letters, digits, '.', '_' or '-', not starting "
                         "with '.')")
    return value


class RecordsFile:
    """One request's records file; handed out by RecordsWriter.open()."""

    __slots__ = ("run_id", "path", "count", "lost", "closed")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.path: str | None = None     # set by the writer thread
        self.count = 0                   # records queued
        self.lost = 0                    # records dropped (queue full)
        self.closed = False


class RecordsWriter:
    """The thread that writes every request's records file of one
    processor.  open(), append() and close() never block on the disk;
    flush() waits until what was queued is written."""

    def __init__(self, directory: str, writer: str) -> None:
        if not os.path.isdir(directory) or not os.access(
                directory, os.W_OK | os.X_OK):
            raise ConfigError(-errno.ENOTDIR, f"QRS_RECORDS_DIR={directory!r}:"
                              " not a directory this process may write in",
                              "ENOTDIR")
        self.directory = directory
        self.writer = writer
        self._q: queue.Queue[tuple[str, RecordsFile, Any]] = queue.Queue(
            QUEUE_MAX)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="qrs-records")
        self._thread.start()

    @classmethod
    def from_env(cls, writer: str) -> RecordsWriter | None:
        """A writer for $QRS_RECORDS_DIR, or None when it is unset."""
        d = os.environ.get("QRS_RECORDS_DIR", "")
        return cls(d, writer) if d else None

    def open(self, run_id: str | None) -> RecordsFile:
        """A new request's file: RUN_ID.jsonl (RUN_ID.1.jsonl, ... when
        that name is taken), or qrs-PID-N.jsonl without a run id."""
        f = RecordsFile(run_id or f"qrs-{os.getpid()}-{next(_counter)}")
        self._put("open", f, None, block=True)
        return f

    def append(self, f: RecordsFile, lines: Iterable[str]) -> None:
        """Records as JSON lines (``Pool.sample(records="json")``)."""
        for rec in lines:
            if self._put("rec", f, rec, block=False):
                f.count += 1
            else:
                f.lost += 1

    def close(self, f: RecordsFile) -> None:
        """The end line; f takes no more records."""
        if not f.closed:
            f.closed = True
            self._put("end", f, None, block=True)

    def close_all(self, files: Iterable[RecordsFile | None]) -> None:
        """The end line of every file still open, then flush()."""
        for f in files:
            if f is not None:
                self.close(f)
        self.flush()

    def flush(self) -> None:
        """Wait until everything queued so far is written."""
        done = threading.Event()
        self._put("flush", RecordsFile(""), done, block=True)
        done.wait()

    def _put(self, op: str, f: RecordsFile, arg: Any, block: bool) -> bool:
        try:
            self._q.put((op, f, arg), block=block)
        except queue.Full:
            return False
        return True

    def _run(self) -> None:
        files: dict[int, Any] = {}
        while True:
            op, f, arg = self._q.get()
            try:
                if op == "open":
                    files[id(f)] = self._create(f)
                elif op == "rec":
                    out = files.get(id(f))
                    if out is not None:
                        out.write(arg + "\n")
                elif op == "end":
                    out = files.pop(id(f), None)
                    if out is not None:
                        out.write(json.dumps({"qrs_records_end": f.count,
                                              "lost": f.lost}) + "\n")
                        out.close()
                elif op == "flush":
                    for out in files.values():
                        out.flush()
                    arg.set()
            except OSError as e:   # the disk, not the step, failed
                log.error("qrs: records of run %s (%s): %s", f.run_id,
                          f.path, e)
                bad = files.pop(id(f), None)
                if bad is not None:
                    try:
                        bad.close()
                    except OSError:
                        pass

    def _create(self, f: RecordsFile) -> Any:
        for n in range(1000):
            name = f.run_id + (f".{n}" if n else "") + ".jsonl"
            path = os.path.join(self.directory, name)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                continue
            f.path = path
            out = os.fdopen(fd, "w", buffering=1 << 16)
            out.write(json.dumps({"qrs_records": 1, "run_id": f.run_id,
                                  "writer": self.writer,
                                  "pid": os.getpid()}) + "\n")
            return out
        raise OSError(errno.EEXIST, f"{f.run_id}.jsonl and 999 more names "
                      "taken")
