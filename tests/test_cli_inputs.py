"""Input files as a user hands them to the CLI: the GPU models a node list may name, and a
cluster YAML that is not a cluster definition -- each refused with exit status 2 and a message
naming the flag, the value and what is allowed."""

from __future__ import annotations

import pytest

from elastico.cli import main
from elastico.errors import InvalidArgument
from elastico.trace import read_nodes

HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def test_a_node_list_accepts_every_model_a_cluster_yaml_accepts(tmp_path):
    # H100-80GB: 80 GiB per NVIDIA's H100 datasheet, as for clusters.py's gpu_model
    f = tmp_path / "n.csv"
    f.write_text(HEADER + "n0,112000,2097152,8,H100-80GB\n")
    (node,) = read_nodes(f)
    assert (node.gpu_model, node.num_gpus, node.gpu_mem_gib) == ("H100-80GB", 8, 80.0)
    f.write_text(HEADER + "n0,112000,2097152,8,Z80\n")
    with pytest.raises(InvalidArgument) as e:
        read_nodes(f)
    assert "H100-80GB" in e.value.allowed and "A100-80GB" in e.value.allowed


def _err(capsys, argv):
    assert main(argv) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("text, words", [
    ("- a\n- b\n", ["--cluster ", ": top level: ['a', 'b'] is not allowed",
                    "a mapping with keys name, description, pools at the top level; got a list"]),
    ("", ["top level: None", "got nothing (an empty document)"]),
])
def test_a_cluster_yaml_that_is_not_a_mapping(tmp_path, capsys, text, words):
    y = tmp_path / "c.yaml"
    y.write_text(text)
    err = _err(capsys, ["simulate", "--cluster", str(y), "--no-progress"])
    for w in words:
        assert w in err, err


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path, capsys):
    y = tmp_path / "c.yaml"
    y.write_text("name: x\npools: [\n")
    for argv, flag in ((["simulate", "--cluster", str(y), "--no-progress"], "--cluster"),
                       (["evaluate", "--clusters", str(y), "--out", str(tmp_path / "o")],
                        "--clusters")):
        err = _err(capsys, argv)
        assert err.startswith(f"elastico: error: {flag}: {str(y)!r} is not allowed (valid YAML; "
                              "line 3, column 1: "), err


def test_every_output_file_is_probed_before_the_work(tmp_path):
    # os.access says yes to root on /dev/full: the shared check opens the file, so every
    # command's output file (simulate --json, predictor --out, evaluate's results.json) fails
    # up front; a probe of a new file leaves nothing behind
    from pathlib import Path

    from elastico.paths import check_output_file
    if Path("/dev/full").exists():
        with pytest.raises(InvalidArgument, match="could not be written"):
            check_output_file("--out", Path("/dev/full"))
    new = tmp_path / "model.json"
    check_output_file("--out", new)
    assert not new.exists()
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    check_output_file("--out", kept)
    assert kept.read_text() == "{}"
