"""Fixtures for the qrs Python tests: a real qrsd (QRSD_BIN, the build's)
on a mock source, in a temporary directory."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from qrsdev import wait_listening

MOCK_YAML = """allow_test_sources: true
default_source: mock
sources:
  mock: {{ type: mock, seed: {seed} }}
  system: {{ type: system }}
"""

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


class Daemon:
    def __init__(self, tmp: Path, seed: int = 7, extra_yaml: str = "") -> None:
        self.dir = tmp
        self.sock = str(tmp / "qrsd.sock")
        self.conf = tmp / "qrsd.yaml"
        self.conf.write_text(MOCK_YAML.format(seed=seed) + extra_yaml)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = os.environ.get("QRSD_BIN")
        if not binary:
            pytest.fail("QRSD_BIN is not set (run through meson test)")
        log = open(self.dir / "qrsd.log", "ab")
        self.proc = subprocess.Popen(
            [binary, "--socket", self.sock, "-c", str(self.conf)],
            stdout=log, stderr=log)
        why = wait_listening(self.proc, self.sock, self.dir / "qrsd.log")
        if why:
            pytest.fail(why)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


def audit_dirs(tmp_path: Path) -> tuple[str, Path, Path]:
    """qrs-audit (QRS_AUDIT_BIN) and two new directories under tmp_path:
    qrsd's journal and the records files."""
    audit = os.environ.get("QRS_AUDIT_BIN", "")
    assert os.access(audit, os.X_OK), f"QRS_AUDIT_BIN ({audit})"
    journal = tmp_path / "journal"
    journal.mkdir()
    recdir = tmp_path / "records"
    recdir.mkdir()
    return audit, journal, recdir


@pytest.fixture
def qrsd(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    d.start()
    yield d
    d.stop()


@pytest.fixture
def client(qrsd: Daemon):
    import qrs
    c = qrs.Client(qrsd.sock)
    yield c
    c.close()
