"""Sampler configurations from dicts, presets and QR_* variables; the
processors' shared settings (threads, connections)."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any

from . import _qrs
from .errors import ConfigError

#: Default cap of a processor's batch pool (QRS_THREADS overrides it).
MAX_DEFAULT_THREADS = 8


def pool_threads() -> int:
    """Threads of the processor's batch pool: $QRS_THREADS (1 .. 256), else
    the CPUs this process may run on, at most MAX_DEFAULT_THREADS."""
    text = os.environ.get("QRS_THREADS", "").strip()
    if text:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if not 1 <= n <= 256:
            raise ConfigError(-errno.EINVAL, f"QRS_THREADS={text!r}: expected"
                              " a thread count from 1 to 256", "EINVAL")
        return n
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_THREADS))


def connections(first: _qrs.Client,
                rows: int) -> tuple[list[_qrs.Client], int]:
    """Connections to qrsd enough for rows requests to hold an open draw
    each (a prefetch): first, then new ones to its socket, one per
    max_inflight rows (qrsd's limits.max_inflight_per_connection, 64 by
    default).  Returns them and the rows per connection: row i draws on
    connection i // that."""
    per = int(first.server_info().get("max_inflight") or 64)
    more = [_qrs.Client(first.socket_path)
            for _ in range(1, -(-rows // per))]
    return [first] + more, per


#: Keys of a config dict that are not fields.
_PRESET_KEYS = ("preset", "qr_preset")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def make_config(fields: Mapping[str, Any] | None = None, *,
                preset: str | None = None, env: bool | Mapping[str, str] = True,
                qr_args: Mapping[str, Any] | None = None) -> _qrs.Config:
    """A libqrs sampler config.

    Layers as in libqrs: ``env`` (True: the process's QR_* variables;
    a mapping: those; False: none), then ``preset``, then ``fields``
    (the reference qr-sampler's field names, as its config model
    third_party/qr-sampler/src/qr_sampler/config/model.py and
    field_names() list them, e.g. ``{"top_k": 40}``; "preset" may be one
    of them) and ``qr_args`` (reference-style ``qr_*`` keys; other keys
    are ignored).  Raises ConfigError naming the field."""
    cfg = _qrs.Config()
    if env is True:
        cfg.load_env()
    elif env:
        cfg.load_env(dict(env))
    else:
        cfg.load_env({})
    fields = dict(fields or {})
    for k in _PRESET_KEYS:
        if k in fields:
            preset = fields.pop(k)
    if preset is not None:
        cfg.set_preset(preset)
    for k, v in fields.items():
        cfg.set(k, _text(v))
    for k, v in (qr_args or {}).items():
        cfg.set_arg(k, _text(v))
    cfg.validate()
    return cfg


def field_names() -> list[str]:
    """Every sampler field name."""
    return _qrs._names(False)


def preset_names() -> list[str]:
    """The built-in presets."""
    return _qrs._names(True)
