"""Hypothesis over the files and command-line arguments ElastiCo reads (issue 9 item 1): trace
CSVs (elastico.trace), observation CSVs (elastico.predictor.observations), pricing instances
(``elastico pricing solve``), TOML serve configs (elastico.runtime.serve_config) and cluster
definitions (elastico.sim.clusters).

Each test starts from a valid file, breaks one cell with a classic -- 0, negative, > 1,
``50m``, NaN, inf, huge integers whose sum overflows, a GPU model that is a substring of a
known one (``A10`` vs ``A100``), empty values, duplicated names, truncation, non-UTF-8 bytes,
a byte-order mark -- and checks that the reader either accepts it as a valid value or raises
InvalidArgument naming the file, line and column (or the field) and the bad value; never
another exception, and an output file is never half-written.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from elastico.cli import main as cli_main
from elastico.errors import InvalidArgument
from elastico.predictor.observations import COLUMNS, BadRows, read_observations
from elastico.runtime.serve_config import load_serve_config
from elastico.trace import read_nodes, read_pods

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

#: Cell values every numeric or name column must either accept or refuse clearly.
CLASSICS = ["", " ", "0", "-0", "-1", "1.5", "50m", "1e3", "nan", "NaN", "inf", "-inf",
            "Infinity", "1e400", "99999999999999999999", str(2**63), str(2**64 + 1),
            "0x10", "1_000", "A10", "A100", "A1", "a10", "T4|A100", "T4|", "|", "V100",
            "\u00e4", "\x00", "\"", "1,2"]
cells = st.one_of(st.sampled_from(CLASSICS), st.text(max_size=8),
                  st.integers(-2**70, 2**70).map(str),
                  st.floats().map(repr))


def _csv_cell(v: str) -> str:
    """``v`` quoted as CSV when needed, so the break stays inside one cell."""
    return '"' + v.replace('"', '""') + '"' if any(c in v for c in ',"\n\r') else v


# ---- trace CSVs --------------------------------------------------------------------------

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time")
POD_ROWS = ["pod-0,12000,16384,1,1000,,LS,Running,0,100,0",
            "pod-1,6000,12288,1,460,V100M16|T4,BE,Succeeded,10,500,20",
            "pod-2,8000,8192,2,1000,A10,BE,Failed,5,900,7"]
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
NODE_ROWS = ["node-0,64000,262144,2,P100", "node-1,96000,786432,8,V100M32",
             "node-2,32000,131072,1,A10"]


def _lines(row: int, value: str) -> range:
    """Lines the error may name when data row ``row`` holds ``value``: its own, up to the end
    of the record when the value carries line breaks."""
    first = row + 2
    return range(first, first + value.replace("\r\n", "\n").count("\n") + 1)


def _write(tmp_path: Path, name: str, header: str, rows: list[str]) -> Path:
    p = tmp_path / name
    p.write_bytes(("\n".join([header, *rows]) + "\n").encode("utf-8"))
    return p


def _check_cell_error(e: InvalidArgument, file: str, line: range, column: str,
                      columns: str) -> None:
    """The error names ``file:line: column`` -- the broken column, or one whose rule involves
    it (scheduled_time >= creation_time; gpu_milli by num_gpu; model by gpu) -- or the row
    ``file:line`` when the break made it the wrong width."""
    lines = {f"{file}:{n}" for n in line}  # a quoted line break moves the record's end
    where, _, col = e.field.partition(": ")
    assert where in lines and (col == "" or col in columns.split(",")), str(e)
    if col == column:
        assert e.value is not None


@FUZZ
@given(row=st.integers(0, 2), col=st.integers(0, 10), value=cells)
def test_trace_pod_cell(tmp_path, row, col, value):
    rows = [r.split(",") for r in POD_ROWS]
    rows[row][col] = _csv_cell(value)
    p = _write(tmp_path, "pods.csv", POD_HEADER, [",".join(r) for r in rows])
    column = POD_HEADER.split(",")[col]
    try:
        pods = read_pods(p)
    except InvalidArgument as e:
        _check_cell_error(e, "pods.csv", _lines(row, value), column, POD_HEADER)
        return
    got = pods[row]
    # accepted: then it is a value the model can use -- finite, bounded, a known model
    assert all(math.isfinite(x) for x in (got.cpu, got.mem_gib, got.gpu_share, got.creation_s))
    assert 0 <= got.num_gpus <= 64 and 0 <= got.gpu_share <= 1
    assert got.gpu_models <= {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32",
                              "A100-40GB", "A100-80GB"}


@FUZZ
@given(row=st.integers(0, 2), col=st.integers(0, 4), value=cells)
def test_trace_node_cell(tmp_path, row, col, value):
    rows = [r.split(",") for r in NODE_ROWS]
    rows[row][col] = _csv_cell(value)
    p = _write(tmp_path, "nodes.csv", NODE_HEADER, [",".join(r) for r in rows])
    try:
        nodes = read_nodes(p)
    except InvalidArgument as e:
        _check_cell_error(e, "nodes.csv", _lines(row, value), NODE_HEADER.split(",")[col],
                          NODE_HEADER)
        return
    assert sum(n.num_gpus for n in nodes) <= 3 * 64
    assert all(math.isfinite(n.cpu) and math.isfinite(n.mem_gib) for n in nodes)


def test_trace_gpu_model_substrings_and_duplicates_are_refused(tmp_path):
    for bad in ("A1", "A100", "V100", "t4", "T4|P100"):
        p = _write(tmp_path, "nodes.csv", NODE_HEADER, [f"node-0,64000,262144,2,{bad}"])
        with pytest.raises(InvalidArgument) as e:
            read_nodes(p)
        assert e.value.field == "nodes.csv:2: model" and e.value.value == bad
    p = _write(tmp_path, "pods.csv", POD_HEADER, [POD_ROWS[0], POD_ROWS[0]])
    with pytest.raises(InvalidArgument) as e:
        read_pods(p)
    assert e.value.field == "pods.csv:3: name" and "duplicated" in str(e.value)


def test_trace_huge_numbers_are_refused_before_any_sum(tmp_path):
    # 8 pods of 1e15 CPU milli each would still sum finitely; 1e16 is over MAX_QUANTITY
    p = _write(tmp_path, "pods.csv", POD_HEADER,
               [f"pod-{i},{10**16},16384,1,1000,,LS,Running,0,100,0" for i in range(8)])
    with pytest.raises(InvalidArgument) as e:
        read_pods(p)
    assert e.value.field == "pods.csv:2: cpu_milli" and e.value.value == str(10**16)


@FUZZ
@given(cut=st.integers(1, 400))
def test_trace_truncated_file_is_refused_or_a_shorter_valid_file(tmp_path, cut):
    full = ("\n".join([POD_HEADER, *POD_ROWS]) + "\n").encode()
    assume(cut < len(full))
    p = tmp_path / "pods.csv"
    p.write_bytes(full[:cut])
    try:
        pods = read_pods(p)
    except InvalidArgument as e:
        assert e.field.startswith("pods.csv"), str(e)
        return
    # only a cut right after a newline is a valid (shorter) file
    assert full[cut - 1:cut] == b"\n" and len(pods) == full[:cut].count(b"\n") - 1


@FUZZ
@given(junk=st.binary(min_size=1, max_size=4).filter(lambda b: not _utf8(b)),
       row=st.integers(0, 2))
def test_trace_non_utf8_names_the_line(tmp_path, junk, row):
    lines = [POD_HEADER.encode(), *(r.encode() for r in POD_ROWS)]
    lines[row + 1] = lines[row + 1].replace(b"pod-", b"pod" + junk, 1)
    p = tmp_path / "pods.csv"
    p.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(InvalidArgument) as e:
        read_pods(p)
    assert e.value.field == f"pods.csv:{row + 2}" and "UTF-8" in str(e.value)


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_trace_line_breaks_inside_cells_and_oversized_cells(tmp_path):
    # a "\r" or form feed inside a quoted cell is that cell's character, not a new line
    p = _write(tmp_path, "nodes.csv", NODE_HEADER, ['"node\r0",64000,262144,2,P100',
                                                    "node-1,64000,262144,2,P\x0c100"])
    with pytest.raises(InvalidArgument) as e:
        read_nodes(p)
    assert e.value.field == "nodes.csv:3: model" and e.value.value == "P\x0c100"
    p = _write(tmp_path, "nodes.csv", NODE_HEADER, ["node-0,64000,262144,2,P1\r00"])
    with pytest.raises(InvalidArgument) as e:  # a lone CR outside quotes: not CSV
        read_nodes(p)
    assert e.value.field == "nodes.csv:2" and "valid CSV" in str(e.value)
    p = _write(tmp_path, "nodes.csv", NODE_HEADER, ["node-0,64000,262144,2,P100",
                                                    "node-1," + "9" * 200_000 + ",1,2,P100"])
    with pytest.raises(InvalidArgument) as e:  # over csv's field size limit
        read_nodes(p)
    assert e.value.field == "nodes.csv:3" and "field larger" in str(e.value)


def test_trace_bom_is_accepted(tmp_path):
    p = tmp_path / "pods.csv"
    p.write_bytes(("\ufeff" + POD_HEADER + "\n" + POD_ROWS[0] + "\n").encode())
    assert [x.name for x in read_pods(p)] == ["pod-0"]


# ---- observation CSVs --------------------------------------------------------------------

OBS_HEADER = ("a_job_type,a_kind,a_batch_size,a_mps_share,a_sm_activity,a_mem_gib,"
              "b_job_type,b_kind,b_batch_size,b_mps_share,b_sm_activity,b_mem_gib,"
              "gpu_model,slowdown_a,slowdown_b,source")
OBS_ROWS = ["ResNet-50 (batch size 64),training,64,0.5,0.6,3.5,LM (batch size 20),training,20,,"
            "0.4,2,V100M16,1.4,1.2,test",
            "A3C,inference,,,,,CycleGAN,,,,,,A10,1.1,,test"]


@FUZZ
@given(row=st.integers(0, 1), col=st.integers(0, 15), value=cells)
def test_observation_cell(row, col, value):
    rows = [r.split(",") for r in OBS_ROWS]
    rows[row][col] = _csv_cell(value)
    text = "\n".join([OBS_HEADER, *(",".join(r) for r in rows)]) + "\n"
    column = OBS_HEADER.split(",")[col]
    try:
        obs = read_observations("obs.csv", text=text)
    except BadRows as e:
        for p in e.problems:
            assert re.fullmatch(rf"obs\.csv:{row + 2}: ({re.escape(column)}|row)", p.field), str(e)
        return
    o = obs[row]
    for prof in (o.a, o.b):
        assert prof.batch_size is None or 1 <= prof.batch_size <= 2**20
        assert 0 <= prof.mem_gib <= 1024 and math.isfinite(prof.mem_gib)
    assert math.isfinite(o.slowdown_a) and o.slowdown_a > 0


@pytest.mark.parametrize("column, value", [
    ("a_batch_size", "0"), ("a_batch_size", "2097152"), ("a_batch_size", "1e30"),
    ("a_mem_gib", "-1"), ("a_mem_gib", "16000000000"), ("a_mem_gib", "inf"),
    ("a_mps_share", "0"), ("a_sm_activity", "1.5"), ("slowdown_a", "50m"),
    ("gpu_model", "A100"), ("gpu_model", "A1"),
])
def test_observation_absurd_values_name_line_column_and_value(column, value):
    cols = OBS_HEADER.split(",")
    rows = [r.split(",") for r in OBS_ROWS]
    rows[0][cols.index(column)] = value
    text = "\n".join([OBS_HEADER, *(",".join(r) for r in rows)]) + "\n"
    with pytest.raises(BadRows) as e:
        read_observations("obs.csv", text=text)
    p = e.value.problems[0]
    assert p.field == f"obs.csv:2: {column}", str(e.value)
    assert str(p.value) == value or p.value == float(value), (p.value, value)


def test_observation_non_utf8_names_the_line(tmp_path):
    p = tmp_path / "obs.csv"
    body = (OBS_HEADER + "\n" + OBS_ROWS[0] + "\n").encode() + b"A3C\xff,,,,,,B,,,,,,A10,1.1,,x\n"
    p.write_bytes(body)
    with pytest.raises(InvalidArgument) as e:
        read_observations(p)
    assert e.value.field == f"{p}:3" and e.value.value == "ff" and "UTF-8" in str(e.value)


@FUZZ
@given(cut=st.integers(1, 600))
def test_observation_truncated_file(tmp_path, cut):
    full = ("\n".join([OBS_HEADER, *OBS_ROWS]) + "\n").encode()
    assume(cut < len(full))
    p = tmp_path / "obs.csv"
    p.write_bytes(full[:cut])
    try:
        obs = read_observations(p)
    except InvalidArgument as e:
        assert e.field.startswith(str(p)), str(e)
        return
    # a row cut inside a cell can still be a valid row (e.g. "source" cut short); never more
    # rows than were written
    assert len(obs) <= 2


def test_predictor_train_on_bad_data_writes_no_model(tmp_path):
    data = tmp_path / "obs.csv"
    data.write_text(OBS_HEADER + "\n" + OBS_ROWS[0].replace("1.4,1.2", "nan,1.2") + "\n")
    out = tmp_path / "model.json"
    assert cli_main(["predictor", "train", "--data", str(data), "--out", str(out)]) == 2
    assert not out.exists()


def test_predictor_folds_with_leave_one_model_out_is_refused(capsys):
    for flag in (["--folds", "3"], ["--seed", "1"]):
        assert cli_main(["predictor", "evaluate", "--cv", "leave-one-model-out", *flag]) == 2
        err = capsys.readouterr().err
        assert flag[0] in err and "leave-one-model-out" in err


def _exit(argv: list[str]) -> int:
    """Exit status of ``elastico argv``: argparse's own refusals (a non-integer for an int
    flag) exit 2 through SystemExit, the commands' checks return 2."""
    try:
        return cli_main(argv)
    except SystemExit as e:
        return e.code


# ---- pricing instances -------------------------------------------------------------------

def _npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


GOOD_INSTANCE = dict(utility=np.array([0.0, 3.0, 0.0, 2.0]), demand=np.array([[0.0], [1.0], [0.0], [1.0]]),
                     offsets=np.array([0, 2, 4]), capacity=np.array([1.0]))
ARRAY_VALUES = st.sampled_from([np.nan, np.inf, -np.inf, -1.0, 0.0, 1e308, 2.0**63, -0.0])


@FUZZ
@given(key=st.sampled_from(["utility", "demand", "capacity", "offsets"]),
       index=st.integers(0, 3), value=ARRAY_VALUES)
def test_pricing_instance_cell(tmp_path, capsys, key, index, value):
    arrays = {k: v.astype(float).copy() for k, v in GOOD_INSTANCE.items()}
    a = arrays[key].reshape(-1)
    a[index % a.size] = value
    arrays[key] = a.reshape(arrays[key].shape)
    p = _npz(tmp_path / "inst.npz", **arrays)
    code = cli_main(["pricing", "solve", "--instance", str(p), "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 2, 3), err
    if code == 2:
        assert re.match(rf"elastico: error: (instance\.)?{key}[\[.]", err), err
    if code == 0:
        import json

        doc = json.loads(out)
        assert all(math.isfinite(x) for x in doc["prices"])


def _save(p: Path, **arrays) -> None:
    with open(p, "wb") as f:  # exactly this name: numpy.savez would add .npz to a str path
        np.savez(f, **arrays)


@pytest.mark.parametrize("make, field", [
    (lambda p: p.write_bytes(b""), "--instance: "),
    (lambda p: p.write_bytes(b"PK\x03\x04 truncated"), "--instance: "),
    (lambda p: _save(p, utility=np.zeros(2), demand=np.zeros((2, 1)), offsets=np.array([0, 2])),
     "--instance: "),  # capacity missing
    (lambda p: _save(p, utility=np.array(["a", "b"], dtype=object), demand=np.zeros((2, 1)),
                     offsets=np.array([0, 2]), capacity=np.ones(1)),
     "instance.utility.dtype"),
    (lambda p: _save(p, utility=np.zeros(2), demand=np.zeros((2, 1)),
                     offsets=np.array([0, 0, 2]), capacity=np.ones(1)),
     "offsets[1]"),  # an empty family
])
def test_pricing_broken_instance_files_exit_2_naming_the_field(tmp_path, capsys, make, field):
    p = tmp_path / "inst.npz"
    make(p)
    assert cli_main(["pricing", "solve", "--instance", str(p)]) == 2
    assert capsys.readouterr().err.startswith(f"elastico: error: {field}")


def test_pricing_truncated_npz(tmp_path, capsys):
    good = _npz(tmp_path / "good.npz", **GOOD_INSTANCE).read_bytes()
    for cut in (10, len(good) // 2, len(good) - 5):
        p = tmp_path / "cut.npz"
        p.write_bytes(good[:cut])
        assert cli_main(["pricing", "solve", "--instance", str(p)]) == 2
        # the file named by its flag, or the array inside it by its data path
        assert capsys.readouterr().err.startswith(("elastico: error: --instance: ",
                                                   "elastico: error: instance."))


@pytest.mark.parametrize("flag, value", [("--max-iterations", "0"), ("--max-iterations", "-1"),
                                         ("--gap-tolerance", "nan"), ("--gap-tolerance", "-1"),
                                         ("--nthreads", "0"), ("--max-iterations", "50m")])
def test_pricing_cli_arguments(tmp_path, capsys, flag, value):
    p = _npz(tmp_path / "inst.npz", **GOOD_INSTANCE)
    assert _exit(["pricing", "solve", "--instance", str(p), flag, value]) == 2
    err = capsys.readouterr().err
    assert f"{flag}: " in err, err  # the flag as typed, not the solver's max_iterations


# ---- TOML serve configs ------------------------------------------------------------------

TOML_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1.5", '"50m"', "nan", "inf", "-inf", "99999999999999999999",
                     "true", '""', '"A10"', "[]", "{}", '"127.0.0.1:50051"', '"0.0.0.0:0"',
                     '"[::1]:0"', '"host:-1"', '"h:65536"', '":80"']),
    st.integers(-2**63, 2**63 - 1).map(str), st.floats(allow_nan=False).map(
        lambda f: "inf" if f == math.inf else "-inf" if f == -math.inf else repr(f)))
TOML_KEYS = ["max_workers", "max_concurrent_rpcs", "grace_s", "metrics_port", "plaintext",
             "address"]


@FUZZ
@given(key=st.sampled_from(TOML_KEYS), value=TOML_VALUES, where=st.sampled_from(["serve", "serve.pricing"]))
def test_serve_config_value(tmp_path, key, value, where):
    assume(not (key == "address" and where == "serve"))
    f = tmp_path / "c.toml"
    plaintext = "" if key == "plaintext" else "plaintext = true\n"
    f.write_text(f"[serve]\n{plaintext}" + (f"[{where}]\n" if where != "serve" else "")
                 + f"{key} = {value}\n")
    try:
        cfg = load_serve_config("pricing", config_path=f, env={})
    except InvalidArgument as e:
        assert e.field in (key, "config", "tls"), str(e)  # tls: plaintext = false, no cert
        return
    assert 1 <= cfg.max_workers <= 256 and 1 <= cfg.max_concurrent_rpcs <= 100_000
    assert math.isfinite(cfg.grace_s) and 0 <= cfg.grace_s <= 3600
    assert cfg.metrics_port is None or 0 <= cfg.metrics_port <= 65535


@FUZZ
@given(data=st.binary(max_size=60))
def test_serve_config_any_bytes(tmp_path, data):
    f = tmp_path / "c.toml"
    f.write_bytes(b"[serve]\nplaintext = true\n" + data)
    try:
        load_serve_config("pricing", config_path=f, env={})
    except InvalidArgument as e:
        assert e.field.startswith(("config", "max_", "grace_s", "metrics_port", "plaintext",
                                   "address", "tls", "pricing_address")), str(e)


def test_serve_config_non_utf8_and_bom(tmp_path):
    f = tmp_path / "c.toml"
    f.write_bytes(b"[serve]\nplaintext = true\n# \xff\n")
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", config_path=f, env={})
    assert e.value.field == "config" and str(f) in str(e.value)


# the variable the user set, and a number shown as one (nan, 0), not as the string "0"
@pytest.mark.parametrize("env, shown", [({"ELASTICO_MAX_WORKERS": "50m"}, "'50m'"),
                                        ({"ELASTICO_GRACE_S": "nan"}, "nan"),
                                        ({"ELASTICO_MAX_CONCURRENT_RPCS": "0"}, "0"),
                                        ({"ELASTICO_PRICING_ADDRESS": "0.0.0.0"},
                                         "address: '0.0.0.0'"),
                                        ({"ELASTICO_METRICS_PORT": "-1"}, "-1")])
def test_serve_environment_values(env, shown):
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", env={**env, "ELASTICO_PLAINTEXT": "1"})
    (name, _), = env.items()
    expected = shown if ": " in shown else f"{name}: {shown}"  # an address keeps its key
    assert str(e.value).startswith(f"{expected} is not allowed")


def test_plaintext_on_a_routable_address_warns(caplog):
    from elastico.runtime.grpc_server import is_loopback
    from elastico.pricing.server import build_server

    assert [is_loopback(a) for a in ("127.0.0.1:1", "[::1]:1", "localhost:1", "0.0.0.0:1",
                                     "[::]:1", "10.0.0.1:1", "myhost:1")] == \
        [True, True, True, False, False, False, False]
    with caplog.at_level("WARNING", logger="elastico.runtime.grpc_server"):
        server, _ = build_server("127.0.0.1:0")
        server.stop(0)
        assert "PLAINTEXT" not in caplog.text
        server, _ = build_server("0.0.0.0:0")
        server.stop(0)
    assert "PLAINTEXT on 0.0.0.0:0" in caplog.text and "--tls-cert" in caplog.text


def test_serve_plaintext_on_all_interfaces_prints_the_warning_to_stderr():
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "elastico.cli", "serve", "pricing",
                             "--address", "0.0.0.0:0", "--plaintext"], stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines: list[str] = []
    try:
        while len(lines) < 20 and not any("listening on" in x for x in lines):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    warned = [i for i, x in enumerate(lines) if "PLAINTEXT on 0.0.0.0:0" in x]
    listening = [i for i, x in enumerate(lines) if "listening on 0.0.0.0:" in x]
    assert warned and listening and warned[0] < listening[0], lines


# ---- cluster definitions (elastico.sim.clusters) ---------------------------------------------

POOL = {"gpu_model": "A100-40GB", "gpus_per_node": 8, "cpu_cores": 128, "mem_gib": 1024,
        "fraction": 1.0}
YAML_VALUES = st.one_of(st.sampled_from([0, -1, 1.5, "50m", math.nan, math.inf, -math.inf,
                                         10**20, "A10", "A100", "A1", "", None, True, [], {}]),
                        st.floats(), st.integers(-2**70, 2**70), st.text(max_size=6))


@FUZZ
@given(key=st.sampled_from(sorted(POOL) + ["gpu_mem_gib"]), value=YAML_VALUES)
def test_cluster_pool_value(key, value):
    from elastico.sim.clusters import parse_cluster

    doc = {"name": "fuzz", "pools": [{**POOL, key: value}]}
    try:
        spec = parse_cluster(doc)
    except InvalidArgument as e:
        assert e.field in (f"pools[0].{key}", "pools[*].fraction"), str(e)
        return
    p = spec.pools[0]
    assert math.isfinite(p.cpu_cores) and math.isfinite(p.mem_gib) and 0 < p.fraction <= 1
    assert math.isfinite(p.gpu_mem_gib) and p.gpu_mem_gib > 0


def test_cluster_without_pools_or_with_fractions_not_summing_to_one():
    from elastico.sim.clusters import parse_cluster

    for pools, field in (([], "pools"), ([{**POOL, "fraction": 0.5}], "pools[*].fraction"),
                         ([POOL, POOL], "pools[*].fraction")):
        with pytest.raises(InvalidArgument) as e:
            parse_cluster({"name": "x", "pools": pools})
        assert e.value.field == field


def test_cluster_integer_beyond_float_range_is_invalid_argument():
    from elastico.sim.clusters import parse_cluster

    with pytest.raises(InvalidArgument) as e:
        parse_cluster({"name": "x", "pools": [{**POOL, "cpu_cores": 10**400}]})
    assert e.value.field == "pools[0].cpu_cores"
