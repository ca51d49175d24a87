"""Trace readers: counts on the bundled openb files, strict errors on small bad CSVs,
sub-cluster GPU sums and model mix.  Counts are from data/alibaba-gpu-v2023-openb/PROVENANCE.md."""

from __future__ import annotations

from collections import Counter

import pytest

from elastico.errors import InvalidArgument
from elastico.model import Node
from elastico.paths import data_file
from elastico.trace import (GPU_MEMORY_GIB, TRACE_CLUSTER_GPUS, read_nodes, read_pods,
                            sub_cluster)

HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
          "creation_time,deletion_time,scheduled_time\n")
GOOD = "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,100,0\n"


@pytest.fixture(scope="module")
def pods():
    return read_pods()


@pytest.fixture(scope="module")
def nodes():
    return read_nodes()


def test_default_pod_list_counts(pods):
    assert len(pods) == 8152
    assert sum(p.num_gpus == 0 for p in pods) == 1088
    assert Counter(p.qos for p in pods) == {"LS": 4647, "BE": 3398, "Burstable": 100,
                                            "Guaranteed": 7}
    assert Counter(p.phase for p in pods) == {"Running": 5193, "Failed": 1870,
                                              "Pending": 897, "Succeeded": 192}
    assert sum(p.scheduled_s is None for p in pods) == 897
    assert Counter(p.num_gpus for p in pods if p.num_gpus > 1) == {2: 16, 4: 15, 8: 44}
    assert all(p.gpu_share == 1.0 for p in pods if p.num_gpus > 1)
    # PROVENANCE: sum of GPU requests = 6086.8 GPUs
    assert sum(p.gpus_total for p in pods) == pytest.approx(6086.8)
    p0 = pods[0]  # openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
    assert (p0.name, p0.cpu, p0.mem_gib, p0.num_gpus, p0.gpu_share) == ("openb-pod-0000", 12.0,
                                                                        16.0, 1, 1.0)
    assert (p0.creation_s, p0.scheduled_s, p0.deletion_s) == (0.0, 0.0, 12537496.0)


def test_node_list_counts(nodes):
    assert len(nodes) == 1213
    assert sum(n.num_gpus for n in nodes) == TRACE_CLUSTER_GPUS == 6212
    assert {n.gpu_model for n in nodes} == {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}
    assert all(n.gpu_mem_gib == GPU_MEMORY_GIB[n.gpu_model] for n in nodes)
    n0 = nodes[0]  # openb-node-0000,64000,262144,2,P100
    assert (n0.cpu, n0.mem_gib, n0.num_gpus, n0.gpu_model) == (64.0, 256.0, 2, "P100")


def test_five_column_multigpu_file_gets_documented_defaults():
    pods = read_pods(data_file("alibaba-gpu-v2023-openb", "openb_pod_list_multigpu20.csv"))
    assert len(pods) == 8324
    p = pods[0]
    assert (p.qos, p.phase, p.gpu_models, p.creation_s, p.scheduled_s, p.deletion_s) == \
        ("", "", frozenset(), 0.0, None, None)


def test_gpuspec_tokens_are_exact_models():
    pods = read_pods(data_file("alibaba-gpu-v2023-openb", "openb_pod_list_gpuspec33.csv"))
    models = set().union(*(p.gpu_models for p in pods))
    assert models == {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}


def test_all_node_list_has_cpu_only_nodes():
    nodes = read_nodes(data_file("alibaba-gpu-v2023-openb", "openb_node_list_all_node.csv"))
    assert len(nodes) == 1523 and sum(n.num_gpus == 0 for n in nodes) == 310


def _write(tmp_path, body, name="pods.csv", header=HEADER):
    p = tmp_path / name
    p.write_text(header + body)
    return p


@pytest.mark.parametrize("row,line,column,value", [
    ("p1,-1000,1024,1,500,,BE,Running,0,10,0\n", 3, "cpu_milli", "-1000"),
    ("p1,1000,1024,1,0,,BE,Running,0,10,0\n", 3, "gpu_milli", "0"),
    ("p1,1000,1024,1,1001,,BE,Running,0,10,0\n", 3, "gpu_milli", "1001"),
    ("p1,1000,1024,2,500,,BE,Running,0,10,0\n", 3, "gpu_milli", "500"),
    ("p1,1000,1024,0,500,,BE,Running,0,10,0\n", 3, "gpu_milli", "500"),
    ("p1,1000,1024,1,500,A100,BE,Running,0,10,0\n", 3, "gpu_spec", "A100"),
    ("p1,1000,1024,1,500,T4|A1,BE,Running,0,10,0\n", 3, "gpu_spec", "T4|A1"),
    ("p1,1000,nan,1,500,,BE,Running,0,10,0\n", 3, "memory_mib", "nan"),
    ("p1,1000,1024,one,500,,BE,Running,0,10,0\n", 3, "num_gpu", "one"),
    ("p1,1000,1024,1.5,500,,BE,Running,0,10,0\n", 3, "num_gpu", "1.5"),
    ("p1,1000,1024,1,500,,XX,Running,0,10,0\n", 3, "qos", "XX"),
    ("p1,1000,1024,1,500,,BE,Gone,0,10,0\n", 3, "pod_phase", "Gone"),
    ("p1,1000,1024,1,500,,BE,Running,0,10,\n", 3, "scheduled_time", ""),
    ("p1,1000,1024,1,500,,BE,Running,5,10,4\n", 3, "scheduled_time", "4"),
    ("p1,1000,1024,1,500,,BE,Running,0,10,11\n", 3, "deletion_time", "10"),
    ("openb-pod-0000,1000,1024,1,500,,BE,Running,0,10,0\n", 3, "name", "openb-pod-0000"),
    # num_gpu is bounded and checked before the gpu_milli rule that depends on it
    ("p1,1000,1024,99999999999999999999,0,,BE,Running,0,10,0\n", 3, "num_gpu",
     "99999999999999999999"),
    ("p1,1000,1024,65,1000,,BE,Running,0,10,0\n", 3, "num_gpu", "65"),
    ("p1,1000,1024,1e400,1000,,BE,Running,0,10,0\n", 3, "num_gpu", "1e400"),
    ("p1,1e16,1024,1,500,,BE,Running,0,10,0\n", 3, "cpu_milli", "1e16"),
    ("p1,1000,99999999999999999999,1,500,,BE,Running,0,10,0\n", 3, "memory_mib",
     "99999999999999999999"),
    ("p1,1000,1024,1,500,,BE,Running,0,99999999999999999999,0\n", 3, "deletion_time",
     "99999999999999999999"),
    ("p1,1000,1024,1,500,,BE,Running,1e300,1e300,1e300\n", 3, "creation_time", "1e300"),
])
def test_bad_pod_row_names_file_line_column_value(tmp_path, row, line, column, value):
    path = _write(tmp_path, GOOD + row)
    with pytest.raises(InvalidArgument) as e:
        read_pods(path)
    assert e.value.field == f"pods.csv:{line}: {column}"
    if value is not None:
        assert e.value.value == value
    assert f"pods.csv:{line}" in str(e.value)


def test_bound_messages_say_the_range(tmp_path):
    with pytest.raises(InvalidArgument) as e:
        read_pods(_write(tmp_path, "p1,1000,1024,99999999999999999999,0,,BE,Running,0,10,0\n"))
    assert "must be an integer in 0..64" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        read_pods(_write(tmp_path, "p1,1e16,1024,1,500,,BE,Running,0,10,0\n"))
    assert "must be a number in 0..1e+15" in str(e.value)
    # the largest allowed values still parse
    ok = read_pods(_write(tmp_path, "p1,1e15,1024,64,1000,,BE,Running,0,1e15,0\n"))
    assert ok[0].num_gpus == 64 and ok[0].deletion_s == 1e15


@pytest.mark.parametrize("row,got", [
    ("p1,1000,1024,1\n", 4),
    ("p1,1000,1024,1,500,,BE,Running,0,10\n", 10),
    ("p1,1000,1024,1,500,,BE,Running,0,10,0,7\n", 12),
])
def test_row_with_wrong_field_count_names_the_row_not_a_column(tmp_path, row, got):
    with pytest.raises(InvalidArgument) as e:
        read_pods(_write(tmp_path, GOOD + row))
    assert e.value.field == "pods.csv:3"
    assert e.value.value == row.rstrip("\n")
    assert e.value.allowed == f"11 fields like the header, got {got}"


def test_header_only_pod_list_has_no_pods(tmp_path):
    with pytest.raises(InvalidArgument) as e:
        read_pods(_write(tmp_path, ""))
    assert e.value.field == "pods.csv" and "no pods" in str(e.value)


def test_utf8_bom_is_accepted(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_bytes(("\ufeff" + HEADER + GOOD).encode("utf-8"))
    assert [p.name for p in read_pods(pods)] == ["openb-pod-0000"]
    nodes = tmp_path / "nodes.csv"
    nodes.write_bytes("\ufeffsn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\n"
                      .encode("utf-8"))
    assert [(n.name, n.num_gpus) for n in read_nodes(nodes)] == [("n1", 2)]


def test_a10_does_not_match_a100(tmp_path):
    ok = read_pods(_write(tmp_path, "p1,1000,1024,1,500,A10|T4,BE,Running,0,10,0\n"))
    assert ok[0].gpu_models == frozenset({"A10", "T4"})


def test_truncated_file_is_rejected(tmp_path):
    p = tmp_path / "pods.csv"
    p.write_text(HEADER + GOOD + "p1,1000,1024,1,500,,BE,Runn")
    with pytest.raises(InvalidArgument, match="pods.csv:3") as e:
        read_pods(p)
    assert "truncated" in str(e.value)


def test_missing_required_column(tmp_path):
    p = _write(tmp_path, "p1,1000,1,500\n", header="name,cpu_milli,num_gpu,gpu_milli\n")
    with pytest.raises(InvalidArgument) as e:
        read_pods(p)
    assert e.value.field == "pods.csv:1: memory_mib"


def test_a_header_missing_several_columns_names_them_all_and_what_it_has(tmp_path):
    p = _write(tmp_path, "1,2\n", header="a,b\n")
    with pytest.raises(InvalidArgument) as e:
        read_pods(p)
    assert (e.value.field, e.value.value) == ("pods.csv:1", "a,b")
    assert e.value.allowed == ("missing required column(s) 'name', 'cpu_milli', 'memory_mib', "
                               "'num_gpu', 'gpu_milli'; the header has 'a', 'b'")


def test_partial_optional_columns_rejected(tmp_path):
    p = _write(tmp_path, "p1,1000,1024,1,500,LS\n",
               header="name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos\n")
    with pytest.raises(InvalidArgument, match="gpu_spec"):
        read_pods(p)


@pytest.mark.parametrize("row,column,value", [
    ("n1,64000,262144,2,A100\n", "model", "A100"),
    ("n1,-1,262144,2,T4\n", "cpu_milli", "-1"),
    ("n1,64000,inf,2,T4\n", "memory_mib", "inf"),
    ("n1,64000,262144,0,T4\n", "model", "T4"),
    # no real node has more than 64 GPUs (DGX/HGX: 8-16); a huge one used to overflow later
    ("n1,64000,262144,99999999999999999999,T4\n", "gpu", "99999999999999999999"),
    ("n1,64000,262144,1000000,T4\n", "gpu", "1000000"),
    ("n1,64000,262144,65,T4\n", "gpu", "65"),
    ("n1,1e16,262144,8,T4\n", "cpu_milli", "1e16"),
    ("n1,64000,1e400,8,T4\n", "memory_mib", "1e400"),
])
def test_bad_node_row(tmp_path, row, column, value):
    p = _write(tmp_path, row, name="nodes.csv", header="sn,cpu_milli,memory_mib,gpu,model\n")
    with pytest.raises(InvalidArgument) as e:
        read_nodes(p)
    assert e.value.field == f"nodes.csv:2: {column}" and e.value.value == value


def test_node_with_64_gpus_is_the_largest_accepted(tmp_path):
    p = _write(tmp_path, "n1,64000,262144,64,T4\n", name="nodes.csv",
               header="sn,cpu_milli,memory_mib,gpu,model\n")
    assert read_nodes(p)[0].num_gpus == 64


@pytest.mark.parametrize("body,detail", [
    ("", "header only, no data rows"),
    ("n1,32000,262144,0,\nn2,32000,262144,0,\n", "2 rows, all with gpu=0"),
])
def test_node_list_without_gpu_nodes_names_the_file(tmp_path, body, detail):
    p = _write(tmp_path, body, name="nodes.csv", header="sn,cpu_milli,memory_mib,gpu,model\n")
    with pytest.raises(InvalidArgument) as e:
        read_nodes(p)
    assert e.value.field == "nodes.csv" and e.value.value == str(p)
    assert f"has no GPU nodes: {detail}" in str(e.value)


@pytest.mark.parametrize("nodes_", [[], [Node("c1", "", 0, 0.0, 32.0, 256.0)]])
def test_sub_cluster_of_a_cluster_without_gpus_says_so(nodes_):
    with pytest.raises(InvalidArgument) as e:
        sub_cluster(nodes_, 64)
    assert e.value.field == "nodes" and "has no GPU nodes" in str(e.value)
    assert "1..0" not in str(e.value)


@pytest.mark.parametrize("gpus", [64, 512])
def test_sub_cluster_exact_and_proportional(nodes, gpus):
    sub = sub_cluster(nodes, gpus)
    assert sum(n.num_gpus for n in sub) == gpus
    assert sub == sub_cluster(nodes, gpus)  # deterministic
    order = {n.name: i for i, n in enumerate(nodes)}
    assert [order[n.name] for n in sub] == sorted(order[n.name] for n in sub)  # trace order
    full = Counter()
    for n in nodes:
        full[n.gpu_model] += n.num_gpus
    got = Counter()
    for n in sub:
        got[n.gpu_model] += n.num_gpus
    for model, g in full.items():
        target = gpus * g / TRACE_CLUSTER_GPUS
        biggest = max(n.num_gpus for n in nodes if n.gpu_model == model)
        # within one node of the proportional target (whole nodes only)
        assert abs(got[model] - target) <= biggest, (model, got[model], target)
    assert any(n.num_gpus == 8 for n in sub)


def test_sub_cluster_512_keeps_8gpu_nodes_for_each_8gpu_model(nodes):
    sub = sub_cluster(nodes, 512)
    eight = {n.gpu_model for n in sub if n.num_gpus == 8}
    assert eight == {"G2", "G3", "V100M16", "V100M32"}


@pytest.mark.parametrize("gpus", [0, -8, 6213, 2.5, True])
def test_sub_cluster_bad_size(nodes, gpus):
    with pytest.raises(InvalidArgument) as e:
        sub_cluster(nodes, gpus)
    assert e.value.field == "gpus"


def test_sub_cluster_no_exact_combination():
    two = [Node(f"n{i}", "T4", 2, 16.0, 32.0, 128.0) for i in range(4)]
    with pytest.raises(InvalidArgument, match="no combination"):
        sub_cluster(two, 3)
    assert sum(n.num_gpus for n in sub_cluster(two, 6)) == 6


def test_blank_lines_at_the_end_are_ignored_but_not_inside(tmp_path):
    assert [p.name for p in read_pods(_write(tmp_path, GOOD + "\n\n"))] == \
        [p.name for p in read_pods(_write(tmp_path, GOOD, name="plain.csv"))]
    with pytest.raises(InvalidArgument, match="empty line"):
        read_pods(_write(tmp_path, GOOD + "\n" + GOOD.replace("p0", "p9"), name="mid.csv"))
