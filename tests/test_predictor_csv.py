"""The observation CSV format: round trip, missing values, and bad rows reported by line
number (never dropped silently), through the reader and the CLI."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from elastico.cli import main
from elastico.errors import InvalidArgument
from elastico.predictor.observations import (
    COLUMNS,
    BadRows,
    Observation,
    read_observations,
    write_observations,
)
from elastico.predictor.profile import JobProfile

HEADER = "a_job_type,a_sm_activity,b_job_type,b_sm_activity,gpu_model,slowdown_a,slowdown_b\n"


def good_row(i: int) -> str:
    return f"job{i},0.5,job{i + 1},0.25,V100M16,1.{i},1.2\n"


def test_round_trip_keeps_every_field(tmp_path):
    a = JobProfile("ResNet-50 (batch size 64)", "training", 0.287, 7.5, gpu_model="T4",
                   model_family="ResNet-50", batch_size=64, precision="amp", sharing="mps",
                   mps_share=0.5, solo_tput=1.56, sm_activity=0.61, dram_activity=0.33,
                   pcie_rx_gbs=1.25, pcie_tx_gbs=0.5, tensor_activity=0.4, power_frac=0.7)
    b = JobProfile("", "", 1.0, gpu_model="T4")  # everything missing
    o = Observation(a, b, "T4", 1.75, None, "unit test")
    path = tmp_path / "o.csv"
    assert write_observations(path, [o]) == 1
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
    (back,) = read_observations(path)
    # the reader recomputes gpu_activity from the schema (sm_activity when measured)
    assert back.a == replace(a, gpu_activity=0.61)
    assert back.b.sm_activity is None and back.b.batch_size is None and back.b.mem_gib == 0.0
    assert back.b.gpu_activity == 1.0  # nothing known: taken as busy
    assert (back.slowdown_a, back.slowdown_b, back.source, back.line) == (1.75, None, "unit test", 2)


def test_only_gpu_model_and_slowdown_a_are_required(tmp_path):
    p = tmp_path / "min.csv"
    p.write_text("gpu_model,slowdown_a\nP100,1.4\nK80,2.0\n")
    obs = read_observations(p)
    assert [(o.gpu_model, o.slowdown_a, o.slowdown_b) for o in obs] == [
        ("P100", 1.4, None), ("K80", 2.0, None)]
    p.write_text("gpu_model,slowdown_b\nP100,1.4\n")
    with pytest.raises(InvalidArgument, match="must have column slowdown_a"):
        read_observations(p)


def test_bad_rows_are_all_reported_by_line_number(tmp_path):
    p = tmp_path / "bad.csv"
    # line 1 header, 2 good, 3 NaN slowdown, 4 negative slowdown, 5 unknown GPU, 6 good,
    # 7 SM activity out of range and a non-integer batch size... (no batch column: activity)
    p.write_text(HEADER + good_row(1)
                 + "j3,0.5,j4,0.5,V100M16,nan,1.1\n"
                 + "j4,0.5,j5,0.5,V100M16,-1.2,1.1\n"
                 + "j5,0.5,j6,0.5,X100,1.3,1.1\n"
                 + good_row(6)
                 + "j7,1.5,j8,0.5,V100M16,1.3,\n")
    with pytest.raises(BadRows) as err:
        read_observations(p)
    probs = [(e.line, e.field.split(": ", 1)[1]) for e in err.value.problems]
    assert probs == [(3, "slowdown_a"), (4, "slowdown_a"), (5, "gpu_model"), (7, "a_sm_activity")]
    msg = str(err.value)
    for needle in (f"{p}:3: slowdown_a", f"{p}:4: slowdown_a: '-1.2'", f"{p}:5: gpu_model: 'X100'",
                   f"{p}:7: a_sm_activity"):
        assert needle in msg
    assert "none was used" in msg


@pytest.mark.parametrize("text,needle", [
    ("", ":1"),
    ("gpu_model,slowdown_a,colour\nP100,1.2,red\n", "colour"),
    ("gpu_model,slowdown_a,slowdown_a\nP100,1.2,1.3\n", "each column once"),
    ("gpu_model,slowdown_a,slowdown_b\nP100,1.2\n", ":2: row"),          # truncated row
    ("gpu_model,slowdown_a\nP100,\n", ":2: slowdown_a"),                 # required but empty
    ("gpu_model,slowdown_a,a_kind\nP100,1.2,trainin\n", ":2: a_kind"),    # unknown kind
    ("gpu_model,slowdown_a,a_batch_size\nP100,1.2,2.5\n", ":2: a_batch_size"),
    ("gpu_model,slowdown_a,a_mem_gib\nP100,1.2,inf\n", ":2: a_mem_gib"),
    ("gpu_model,slowdown_a\nP100,0\n", ":2: slowdown_a"),
    ("gpu_model,slowdown_a\nP100,1e-300\n", ":2: slowdown_a"),  # overflowed 1/slowdown
    ("gpu_model,slowdown_a,slowdown_b\nP100,1.2,51\n", ":2: slowdown_b"),
])
def test_bad_files_name_the_place(tmp_path, text, needle):
    p = tmp_path / "x.csv"
    p.write_text(text)
    with pytest.raises(InvalidArgument) as err:
        read_observations(p)
    assert needle in str(err.value)


def test_cli_reports_bad_rows_and_exits_2(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    p.write_text(HEADER + good_row(1) + good_row(2) + "j,0.5,k,0.5,V100M16,NaN,1.0\n")
    for cmd in (["predictor", "evaluate", "--data", str(p), "--cv", "kfold", "--json"],
                ["predictor", "train", "--data", str(p), "--out", str(tmp_path / "m.json")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert f"{p}:4: slowdown_a" in err
    assert not (tmp_path / "m.json").exists()
    assert main(["predictor", "evaluate", "--data", str(tmp_path / "nope.csv"),
                 "--cv", "kfold"]) == 2
    assert "nope.csv" in capsys.readouterr().err


def test_stream_writer_and_blank_lines(tmp_path):
    buf = io.StringIO()
    o = Observation(JobProfile("a", "inference", 0.5), JobProfile("b", "service", 0.5), "A10",
                    1.1, 1.2)
    write_observations(buf, [o, o])
    text = buf.getvalue().replace("\n", "\n\n", 1)  # a blank line after the header
    back = read_observations("mem.csv", text=text)
    assert len(back) == 2 and back[0].a.kind == "inference" and back[1].b.kind == "service"
    assert json.loads(json.dumps([x.slowdown_b for x in back])) == [1.2, 1.2]


def test_a_utf8_bom_is_not_part_of_the_header(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(("\ufeff" + HEADER + good_row(1) + good_row(2)).encode("utf-8"))
    plain = tmp_path / "plain.csv"
    plain.write_text(HEADER + good_row(1) + good_row(2))
    assert read_observations(p) == read_observations(plain)


def test_train_refuses_outputs_that_would_overwrite_each_other_or_the_data(tmp_path, capsys):
    data = tmp_path / "obs.csv"
    data.write_text(HEADER + good_row(1) + good_row(2))
    before = data.read_text()
    m = tmp_path / "m.json"
    for args, flag in ((["--out", str(m), "--report", str(m)], "--report"),
                       (["--out", str(data)], "--out"),
                       (["--out", str(m), "--report", str(data)], "--report")):
        assert main(["predictor", "train", "--data", str(data), *args]) == 2
        assert flag in capsys.readouterr().err
    assert data.read_text() == before and not m.exists()
    assert main(["predictor", "train", "--data", str(data),
                 "--out", str(tmp_path / "no" / "dir" / "m.json")]) == 2
    assert "--out" in capsys.readouterr().err
