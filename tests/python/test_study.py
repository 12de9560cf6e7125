"""A study end to end through qrs.vllm: a real qrsd with a seeded mock
source standing in for the quantum arm and a prng control, requests
that name the study and carry their run id (the unit), vLLM's records
files, then qrs-audit --study before and after the seeds are revealed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vllm.v1.worker.gpu.sample.logits_processor import (
    build_custom_logits_processors,
    build_custom_logits_processors_params_validator)

from conftest import Daemon, audit_dirs
from test_vllm import FQCN, ctx, req_states, rows, sp

UNITS = 24
STEPS = 3
SLOTS = 8


def _seed(path: Path, byte: int) -> str:
    hexs = bytes((byte + i) & 0xFF for i in range(32)).hex()
    path.write_text(hexs + "\n")
    path.chmod(0o600)
    return hexs


def test_a_blinded_study_through_vllm_that_qrs_audit_unblinds(
        tmp_path: Path, monkeypatch) -> None:
    audit, journal, recdir = audit_dirs(tmp_path)
    assign = _seed(tmp_path / "pilot.assign", 3)
    control = _seed(tmp_path / "control.seed", 101)
    d = Daemon(tmp_path)
    d.conf.write_text(f"""allow_test_sources: true
default_source: mock
journal: {{ dir: {journal} }}
sources:
  mock: {{ type: mock, seed: 7 }}
  control: {{ type: prng, seed_file: {tmp_path / 'control.seed'} }}
studies:
  pilot1:
    arms: [mock, control]
    unit: request
    planned_units: {UNITS}
    statistic: mean_surprisal
    alpha: 0.05
    effect: 0.5
    assignment_seed_file: {tmp_path / 'pilot.assign'}
""")
    d.start()
    try:
        monkeypatch.setenv("QRS_SOCKET", d.sock)
        monkeypatch.setenv("QRS_RECORDS_DIR", str(recdir))
        # vLLM's admission check knows the study as a source qrsd serves
        build_custom_logits_processors_params_validator([FQCN])(
            sp(qr_entropy_source_type="pilot1", qr_run_id="u0"))
        (p,) = build_custom_logits_processors(None, req_states(), False,
                                              [FQCN])
        labels: dict[str, str] = {}
        for first in range(0, UNITS, SLOTS):
            batch = list(range(first, min(first + SLOTS, UNITS)))
            for slot, unit in enumerate(batch):
                # the unit is the run id (no qr_study_unit needed)
                assert p.add_request(slot, sp(
                    qr_entropy_source_type="pilot1", qr_run_id=f"u{unit}",
                    qr_top_k=40))
            slots = list(range(len(batch)))
            for step in range(STEPS):
                p.apply(rows(len(batch), 1000 * first + step),
                        ctx(slots, [0] * len(slots)))
            p.flush_records()
            for slot, unit in enumerate(batch):
                recs = p.records(slot)
                assert len(recs) == STEPS
                used = {r["entropy_source_used"] for r in recs}
                assert len(used) == 1, "a unit stays in its arm"
                (labels[f"u{unit}"],) = used
                assert all(r["entropy_source_type"] == "study"
                           for r in recs)
        # the binding's own draw: a unit keeps its arm; no unit, no draw;
        # status by label
        import qrs
        c = qrs.Client(d.sock)
        try:
            (info,) = c.status()["studies"]
            assert info["name"] == "pilot1" and info["state"] == "complete"
            assert info["units_seen"] == UNITS
            assert sorted(x["label"] for x in info["labels"]) == ["A", "B"]
            assert sum(x["units"] for x in info["labels"]) == UNITS
            got = c.draw(source="pilot1", unit="u3")
            assert got["served_by"] == labels["u3"]
            assert got["served_type"] == "study"
            with pytest.raises(qrs.QrsError, match="unit"):
                c.draw(source="pilot1")
        finally:
            c.close()
        # the next requests end the last files
        for slot in range(SLOTS):
            p.add_request(slot, sp())
        p.apply(rows(1, 5), ctx([0], [0]))
        p.flush_records()
        status = subprocess.run(
            [os.environ["QRSCTL_BIN"], "-s", d.sock, "status"],
            capture_output=True, text=True, check=True).stdout
    finally:
        d.stop()
    assert set(labels.values()) == {"pilot1/A", "pilot1/B"}, labels
    # blinded everywhere the experimenter looks: the records files
    files = sorted(recdir.glob("u*.jsonl"))
    assert len(files) == UNITS
    for f in files:
        text = f.read_text()
        assert "mock" not in text and "control" not in text, f
    # qrsctl status lists the sources, but nothing pairs a label with one
    assert "pilot1" in status
    for line in status.splitlines():
        if "pilot1" in line:
            assert "mock" not in line and "control" not in line, line

    study = tmp_path / "study"
    shutil.copytree(journal, study / "journal")
    (study / "records").mkdir()
    for f in files:
        shutil.copy(f, study / "records")

    def run() -> tuple[int, dict]:
        r = subprocess.run([audit, "--json", "--study", str(study)],
                           capture_output=True, text=True, check=False)
        return r.returncode, json.loads(r.stdout)

    rc, blind = run()
    assert rc == 0, blind
    text = json.dumps(blind)
    assert "mock" not in text and "control" not in text, \
        "before the reveal: counts per label only"
    (study / "reveal.json").write_text(json.dumps(
        {"study": "pilot1", "assignment_seed": assign,
         "seeds": {"control": control}}))
    rc, v = run()
    assert rc == 0 and v["verdict"] == "intact", v
    (st,) = v["studies"]
    assert st["units"] == UNITS and st["complete"] is True
    # the labels the records carried are the arms the seed gives them
    arm = {f"pilot1/{x['label']}": x["arm"] for x in st["labels"]}
    assert sorted(arm.values()) == ["control", "mock"]
    per_label = {x["label"]: x["units"] for x in st["labels"]}
    assert per_label == {k[-1]: list(labels.values()).count(k)
                         for k in arm}
    pri = v["primary"]
    assert pri["statistic"] == "mean_surprisal" and pri["computed"]
    assert 0.0 <= pri["p"] <= 1.0 and pri["n_a"] + pri["n_b"] == UNITS
    assert pri["diff_ci"][0] <= pri["diff"] <= pri["diff_ci"][1]
    assert set(v["exploratory"]) == {"mean_probit_diff", "ks_u"}
    # a wrong seed is named
    (study / "reveal.json").write_text(json.dumps(
        {"study": "pilot1", "assignment_seed": control,
         "seeds": {"control": control}}))
    rc, v = run()
    assert rc == 1, v
