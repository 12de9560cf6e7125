"""Typed exceptions for libqrs's QRS_E_* and errno codes."""

from __future__ import annotations

import errno as _errno


class QrsError(Exception):
    """A libqrs call failed.  ``code`` is the negative QRS_E_* / errno
    value, ``name`` its constant ("QRS_E_ENTROPY", "ECONNREFUSED")."""

    def __init__(self, code: int, message: str, name: str | None = None,
                 detail: str = "", hint: str = "") -> None:
        self.code = code
        self.name = name or str(code)
        self.detail = detail
        text = f"{message} ({self.name})"
        if detail:
            text = f"{detail}: {text}"
        if hint:
            text = f"{text}; {hint}"
        super().__init__(text)


class ConfigError(QrsError, ValueError):
    """An unknown sampler field / preset, or a bad value."""


class LogitsError(QrsError, ValueError):
    """NaN or +inf logits, an all -inf row, or no candidate left."""


class URangeError(QrsError, ValueError):
    """A selection u that is NaN, infinite or outside [0, 1]
    (QRS_E_U_RANGE): ``Sampler.select_u`` and ``Pool.sample(u=...)``
    refuse it before sampling anything; 0 and 1 are accepted."""


class EntropyError(QrsError):
    """qrsd could not serve the draw (source failed, unknown source,
    bad sample count or amplifier parameters)."""


class DaemonUnavailable(QrsError, ConnectionError):
    """No qrsd at the socket, no permission, or the connection was
    lost with the request in flight."""


class PermissionDenied(DaemonUnavailable, PermissionError):
    """qrsd refused this user (QRS_E_PERMISSION: only root, qrsd's own
    user and members of its ``access.group`` may connect), or the
    socket's mode does not let this user open it (EACCES, EPERM)."""


class DaemonTimeout(QrsError, TimeoutError):
    """qrsd did not answer in time."""


class BusyError(QrsError):
    """qrsd refused: too many connections or requests in flight."""


class ProtocolError(QrsError):
    """A malformed frame or no common protocol version."""


def _errno_codes(*names: str) -> set[int]:
    return {-getattr(_errno, n) for n in names if hasattr(_errno, n)}


_BY_CODE: dict[int, type[QrsError]] = {}
for _c in (-1102, -1103):
    _BY_CODE[_c] = ConfigError
for _c in (-1104, -1105):
    _BY_CODE[_c] = LogitsError
_BY_CODE[-1106] = URangeError
for _c in (-1005, -1006, -1007, -1012, -1020, -1021):
    _BY_CODE[_c] = EntropyError
for _c in (-1100, -1013) + tuple(_errno_codes(
        "ENOENT", "ECONNREFUSED", "ECONNRESET", "EPIPE", "ENOTCONN",
        "ENAMETOOLONG")):
    _BY_CODE[_c] = DaemonUnavailable
for _c in (-1022,) + tuple(_errno_codes("EACCES", "EPERM")):
    _BY_CODE[_c] = PermissionDenied
for _c in (-1010,) + tuple(_errno_codes("ETIMEDOUT")):
    _BY_CODE[_c] = DaemonTimeout
_BY_CODE[-1009] = BusyError
for _c in (-1001, -1002, -1003, -1014):
    _BY_CODE[_c] = ProtocolError


# What to check, after the message (as qrsctl says it).
_HINTS: dict[int, str] = {
    -1022: "qrsd refused this user: only root, qrsd's own user and members "
           "of its access.group may connect (qrsd logs which group)",
}
for _c in _errno_codes("EACCES", "EPERM"):
    _HINTS[_c] = "may this user open qrsd's socket (its mode and group)?"


def error_for(code: int, detail: str = "") -> QrsError:
    """The exception object for a libqrs return code."""
    from . import _qrs  # the extension: qrs_strerror()

    message, name = _qrs.strerror(code)
    return _BY_CODE.get(code, QrsError)(code, message, name, detail,
                                        _HINTS.get(code, ""))


def raise_code(code: int, detail: str = "") -> None:
    """Raise the exception for code (the extension calls this)."""
    raise error_for(code, detail)
