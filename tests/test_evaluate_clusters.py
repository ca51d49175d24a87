"""Cluster definitions for ``elastico evaluate`` (elastico.sim.clusters): the bundled MIG cluster
builds the node counts its fractions say, and every bad field is refused by name and value."""

from __future__ import annotations

import copy

import pytest

from elastico.sim.clusters import TRACE, load_cluster, parse_cluster

from elastico.model import MIG_GPUS_LABEL, mig_gpus_of
from elastico.errors import InvalidArgument

GOOD = {"name": "mix", "pools": [
    {"gpu_model": "A100-80GB", "gpus_per_node": 8, "cpu_cores": 128, "mem_gib": 2048,
     "fraction": 0.75},
    {"gpu_model": "A100-40GB", "gpus_per_node": 4, "cpu_cores": 64, "mem_gib": 512,
     "fraction": 0.25, "gpu_mem_gib": 40},
]}


def test_bundled_mig_cluster_builds_whole_dgx_nodes():
    spec = load_cluster("a100-mig")
    assert spec.name == "a100" and spec.label(512) == "a100-512"
    nodes = spec.nodes(512)
    # half of 512 GPUs per pool, 8 per node -> 32 + 32 nodes
    assert len(nodes) == 64
    assert sum(n.num_gpus for n in nodes if n.gpu_model == "A100-80GB") == 256
    assert sum(n.num_gpus for n in nodes if n.gpu_model == "A100-40GB") == 256
    assert {n.gpu_mem_gib for n in nodes if n.gpu_model == "A100-40GB"} == {40.0}
    assert all(n.mig_capable for n in nodes)
    assert len({n.name for n in nodes}) == len(nodes)
    # the A100-40GB half is in MIG mode (every GPU of those nodes), the A100-80GB half not
    mig = mig_gpus_of(nodes)
    assert len(mig) == 256 and {nodes[i].gpu_model for i, _ in mig} == {"A100-40GB"}


def test_bundled_a100_h100_cluster():
    spec = load_cluster("a100h100-mig")
    assert spec.name == "a100h100" and spec.label(64) == "a100h100-64"
    for gpus in (64, 512):
        nodes = spec.nodes(gpus)
        per = {m: sum(n.num_gpus for n in nodes if n.gpu_model == m)
               for m in ("A100-80GB", "A100-40GB", "H100-80GB")}
        assert per == {"A100-80GB": gpus * 3 // 8, "A100-40GB": gpus * 3 // 8,
                       "H100-80GB": gpus // 4}
        assert len({n.name for n in nodes}) == len(nodes)  # two pools per model, unique names
        # DGX H100: 112 cores, 2 TiB, 80 GB GPUs; 3/8 of all GPUs in MIG mode
        h = [n for n in nodes if n.gpu_model == "H100-80GB"]
        assert {(n.cpu, n.mem_gib, n.gpu_mem_gib) for n in h} == {(112.0, 2048.0, 80.0)}
        assert len(mig_gpus_of(nodes)) == gpus * 3 // 8


def test_mig_gpus_per_node_labels_the_first_gpus():
    doc = copy.deepcopy(GOOD)
    doc["pools"][1]["mig_gpus_per_node"] = 2
    nodes = parse_cluster(doc).nodes(64)
    small = [i for i, n in enumerate(nodes) if n.gpu_model == "A100-40GB"]
    assert mig_gpus_of(nodes) == [(i, g) for i in small for g in (0, 1)]
    assert all(dict(nodes[i].labels)[MIG_GPUS_LABEL] == "2" for i in small)


def test_fractions_give_node_counts():
    spec = parse_cluster(copy.deepcopy(GOOD))
    nodes = spec.nodes(64)
    # 64 x 0.75 / 8 = 6 nodes of 8; 64 x 0.25 / 4 = 4 nodes of 4
    assert [n.num_gpus for n in nodes if n.gpu_model == "A100-80GB"] == [8] * 6
    assert [n.num_gpus for n in nodes if n.gpu_model == "A100-40GB"] == [4] * 4


def test_size_without_whole_nodes_is_refused():
    spec = parse_cluster(copy.deepcopy(GOOD))
    with pytest.raises(InvalidArgument) as e:
        spec.nodes(20)  # 20 x 0.75 / 8 = 1.875 nodes
    assert e.value.field == "gpus" and e.value.value == 20
    assert "pools[0]" in str(e.value) and "1.875" in str(e.value)


@pytest.mark.parametrize("name", ["a100-mig", "a100h100-mig", "good"])
def test_the_refusal_names_the_sizes_that_build(name):
    # brute force over 1..400 GPUs: the sizes that build are exactly the multiples of the step
    # the refusal names (GOOD: 0.75 / 8 and 0.25 / 4 -> multiples of 32 and 16 -> 32)
    spec = parse_cluster(copy.deepcopy(GOOD)) if name == "good" else load_cluster(name)
    built = []
    for g in range(1, 401):
        try:
            spec.nodes(g)
        except InvalidArgument as e:
            refusal = str(e)
        else:
            built.append(g)
    step = spec.whole_node_step()
    assert step == {"a100-mig": 16, "a100h100-mig": 64, "good": 32}[name]
    assert built == list(range(step, 401, step))
    assert f"a multiple of {step}: {step}, {2 * step}, {3 * step}, ..." in refusal
    assert load_cluster(TRACE).whole_node_step() is None


def test_trace_is_the_trace_mix():
    spec = load_cluster(TRACE)
    assert spec.label(64) == "trace-64"
    assert sum(n.num_gpus for n in spec.nodes(64)) == 64


def _bad(mutate):
    doc = copy.deepcopy(GOOD)
    mutate(doc)
    with pytest.raises(InvalidArgument) as e:
        parse_cluster(doc)
    return e.value


@pytest.mark.parametrize("mutate, field, value", [
    (lambda d: d.pop("name"), "name", None),
    (lambda d: d.update(name="Bad Name"), "name", "Bad Name"),
    (lambda d: d.update(name=TRACE), "name", TRACE),
    (lambda d: d.update(colour="red"), "colour", "red"),
    (lambda d: d.update(pools=[]), "pools", []),
    (lambda d: d["pools"][0].update(gpu_model="H100"), "pools[0].gpu_model", "H100"),
    # a GPU memory that contradicts the model's (A100-80GB has 80 GiB)
    (lambda d: d["pools"][0].update(gpu_mem_gib=40), "pools[0].gpu_mem_gib", 40),
    (lambda d: d["pools"][0].update(gpu_model="H100-80GB", gpu_mem_gib=40),
     "pools[0].gpu_mem_gib", 40),
    (lambda d: d["pools"][1].update(mig_gpus_per_node=5), "pools[1].mig_gpus_per_node", 5),
    (lambda d: d["pools"][1].update(mig_gpus_per_node=-1), "pools[1].mig_gpus_per_node", -1),
    (lambda d: d["pools"][1].update(gpu_model="T4", gpu_mem_gib=16, mig_gpus_per_node=1),
     "pools[1].mig_gpus_per_node", 1),
    (lambda d: d["pools"][0].update(gpus_per_node=0), "pools[0].gpus_per_node", 0),
    (lambda d: d["pools"][0].update(gpus_per_node=8.5), "pools[0].gpus_per_node", 8.5),
    (lambda d: d["pools"][1].update(fraction=0.0), "pools[1].fraction", 0.0),
    (lambda d: d["pools"][1].update(fraction=True), "pools[1].fraction", True),
    (lambda d: d["pools"][1].update(cpu_cores="many"), "pools[1].cpu_cores", "many"),
    (lambda d: d["pools"][1].update(mem_gib=float("nan")), "pools[1].mem_gib", None),
    (lambda d: d["pools"][1].pop("mem_gib"), "pools[1].mem_gib", None),
    (lambda d: d["pools"][1].update(extra=1), "pools[1].extra", 1),
    (lambda d: d["pools"][1].update(fraction=0.5), "pools[*].fraction", 1.25),
    # a YAML integer beyond float range, and a float above the 1e15 sanity bound
    (lambda d: d["pools"][0].update(cpu_cores=10**400), "pools[0].cpu_cores", 10**400),
    (lambda d: d["pools"][0].update(mem_gib=1e300), "pools[0].mem_gib", 1e300),
])
def test_bad_fields_are_named(mutate, field, value):
    err = _bad(mutate)
    assert err.field == field
    if value is not None:
        assert err.value == value


def test_h100_80gb_needs_no_gpu_mem_gib():
    # 80 GiB by NVIDIA's H100 datasheet (elastico.trace.GPU_MEMORY_GIB)
    doc = copy.deepcopy(GOOD)
    doc["pools"][0]["gpu_model"] = "H100-80GB"
    assert parse_cluster(doc).pools[0].gpu_mem_gib == 80.0


def test_the_mig_models_listed_are_ones_gpu_model_accepts():
    err = _bad(lambda d: d["pools"][1].update(gpu_model="T4", gpu_mem_gib=16,
                                              mig_gpus_per_node=1))
    listed = err.allowed.split("MIG models: ")[1].rstrip(")").split(", ")
    # every MIG table's model is a GPU model of the catalogue, so a cluster may use each
    assert listed == ["A100-40GB", "A100-80GB", "H100-80GB", "H100-94GB", "H100-96GB", "H200", "A30"]
    for model in listed:  # each one passes as a gpu_model with MIG GPUs
        doc = copy.deepcopy(GOOD)
        doc["pools"][1].update(gpu_model=model, mig_gpus_per_node=1)
        del doc["pools"][1]["gpu_mem_gib"]
        assert parse_cluster(doc).pools[1].mig_gpus_per_node == 1


@pytest.mark.parametrize("doc, got", [(["a", "b"], "got a list"),
                                      (None, "got nothing (an empty document)")])
def test_not_a_mapping(doc, got):
    with pytest.raises(InvalidArgument) as e:
        parse_cluster(doc)
    assert e.value.field == "top level" and e.value.value == doc
    assert "a mapping with keys name, description, pools at the top level" in e.value.allowed
    assert got in e.value.allowed


def test_unknown_reference_and_bad_yaml(tmp_path):
    with pytest.raises(InvalidArgument) as e:
        load_cluster("no-such-cluster")
    assert e.value.field == "cluster" and "a100-mig" in e.value.allowed
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\npools: [\n")
    with pytest.raises(InvalidArgument) as e:
        load_cluster(str(bad))
    # the reference itself is the field (the CLI puts its flag there), with yaml's position
    assert e.value.field == "cluster" and e.value.value == str(bad)
    assert "valid YAML; line 3, column 1:" in e.value.allowed
    ok = tmp_path / "ok.yaml"
    import yaml

    ok.write_text(yaml.safe_dump(GOOD))
    assert load_cluster(str(ok)).name == "mix"


def test_small_mig_evaluate_run_end_to_end(tmp_path):
    # a100-16: one normal A100-80GB node, one MIG-mode A100-40GB node; elastico uses MIG
    # instances and keeps every service within its bound
    import json

    from elastico.cli import main

    out = tmp_path / "ev"
    assert main(["evaluate", "--workload", "openb", "--gpus", "16", "--clusters", "a100-mig",
                 "--policies",
                 "exclusive,elastico", "--seeds", "0", "--jobs-per-gpu", "2", "--jobs", "1",
                 "--out", str(out)]) == 0
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert {r["policy"] for r in runs} == {"exclusive", "elastico"}
    for r in runs:
        assert r["cluster"] == "a100-16" and r["service_bound_violations"] == 0
        assert r["jobs_completed"] > 0


@pytest.mark.parametrize("model,value", [("A100-40GB", "9"), ("A100-40GB", "many"), ("T4", "1")])
def test_bad_mig_label_is_named(model, value):
    from elastico.model import Node

    nodes = [Node("ok", "A100-40GB", 8, 40.0, 128.0, 1024.0),
             Node("bad", model, 8, 40.0, 128.0, 1024.0, ((MIG_GPUS_LABEL, value),))]
    with pytest.raises(InvalidArgument) as e:
        mig_gpus_of(nodes)
    assert e.value.field == f"nodes[1].labels[{MIG_GPUS_LABEL}]" and e.value.value == value


@pytest.mark.parametrize("text, line, key", [
    ("name: x\nname: y\npools: []\n", 2, "name"),
    ("name: x\npools:\n  - gpu_model: A100-80GB\n    gpus_per_node: 8\n    gpus_per_node: 4\n",
     5, "gpus_per_node"),
])
def test_a_key_given_twice_is_refused_with_its_line(tmp_path, text, line, key):
    # PyYAML alone keeps the last value silently: 'gpus_per_node: 4' would win unseen
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as e:
        load_cluster(str(path))
    assert e.value.field == "cluster" and e.value.value == str(path)
    assert f"line {line}, column" in e.value.allowed
    assert f"found duplicate key '{key}'" in e.value.allowed


def test_merge_keys_may_still_be_overridden(tmp_path):
    # '<<' merges a mapping whose keys the pool may override (YAML merge-key spec): legal,
    # so not a duplicate; the override wins (8 GPUs per node, not the merged 4)
    path = tmp_path / "merge.yaml"
    path.write_text("name: mix\npools:\n"
                    "  - <<: {gpu_model: A100-80GB, gpus_per_node: 4, cpu_cores: 128,\n"
                    "         mem_gib: 2048, fraction: 1.0}\n"
                    "    gpus_per_node: 8\n")
    nodes = load_cluster(str(path)).nodes(16)
    assert len(nodes) == 2 and all(n.num_gpus == 8 for n in nodes)


def test_a_cluster_definition_builds_at_most_max_cluster_gpus():
    from elastico.sim.clusters import MAX_CLUSTER_GPUS

    spec = load_cluster("a100h100-mig")
    assert MAX_CLUSTER_GPUS % spec.whole_node_step() == 0
    nodes = spec.nodes(MAX_CLUSTER_GPUS)
    assert sum(n.num_gpus for n in nodes) == MAX_CLUSTER_GPUS == 8 * len(nodes)
    # above it: refused at once, not after building millions of nodes
    for too_many in (MAX_CLUSTER_GPUS + 64, 10 ** 9):
        with pytest.raises(InvalidArgument) as e:
            spec.nodes(too_many)
        assert e.value.field == "gpus" and "at most 65,536" in str(e.value)
