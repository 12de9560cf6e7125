"""qrs: entropy-driven token sampling through libqrs and qrsd.

    import qrs
    client = qrs.Client()                 # $QRS_SOCKET or /run/qrsd/qrsd.sock
    sampler = qrs.Sampler(qrs.make_config({"top_k": 40}), vocab_size)
    token = sampler.sample_token(client, logits_row)   # numpy / torch row

Rows are read in place (f32, f16, bf16, f64; C-contiguous); errors are
qrs.QrsError subclasses (qrs.errors).  Engines: qrs.transformers,
qrs.vllm."""

from __future__ import annotations

import os as _os

# Development hook: the extension from a meson build dir (meson test sets
# it; an installed package has _qrs beside this file).
_ext_dir = _os.environ.get("QRS_PYTHON_EXT_DIR")
if _ext_dir:
    __path__.append(_ext_dir)  # type: ignore[name-defined]

from . import _qrs  # noqa: E402
from . import errors  # noqa: E402
from ._config import field_names, make_config, preset_names  # noqa: E402
from .errors import (  # noqa: E402
    BusyError, ConfigError, DaemonTimeout, DaemonUnavailable, EntropyError,
    LogitsError, PermissionDenied, ProtocolError, QrsError, URangeError)

_qrs._set_raise(errors.raise_code)

Client = _qrs.Client
Config = _qrs.Config
Sampler = _qrs.Sampler
Pool = _qrs.Pool
force_one_hot = _qrs.force_one_hot
libqrs_version: str = _qrs.libqrs_version

__all__ = [
    "BusyError", "Client", "Config", "ConfigError", "DaemonTimeout",
    "DaemonUnavailable", "EntropyError", "LogitsError", "PermissionDenied",
    "Pool", "ProtocolError", "QrsError", "Sampler", "URangeError", "errors",
    "field_names", "force_one_hot", "libqrs_version", "make_config",
    "preset_names",
]
