"""``elastico llm predict`` and ``elastico llm plan`` (issue 21, deliverable 5): their output
against values computed by hand from the LLM model, and a plan never offering a configuration
that does not fit.

Hand-worked: Llama-3-8B fp16 on one A100-80GB, batch 32 of 512 + 128 tokens: weights
8.030e9 x 2 B = 14.957 GiB; KV cache 32 x 640 tokens x 131,072 B (2 x 32 layers x 8 KV heads
x 128 x 2 B) = 2.5 GiB; ``tokens_per_s`` = 32 x 640 / ``latency_s``.  Llama-3-70B (70.554e9,
131.4 GiB in fp16) fits no single 80 GiB GPU and no TP-2 group at a 0.75 share (60 GiB a GPU,
of which vLLM may use 54; weights 65.7 GiB a GPU).
"""

from __future__ import annotations

import json

import pytest

from elastico.cli import main
from elastico.perf import llm as P

L8 = P.llm_model("Llama-3-8B")
GIB = float(1 << 30)


def run_json(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_predict_prints_the_models_latency_tokens_per_s_fit_and_memory(capsys):
    out = run_json(capsys, ["llm", "predict", "--model", "Llama-3-8B", "--gpu", "A100-80GB",
                            "--tp", "1", "--batch", "32", "--input-tokens", "512",
                            "--output-tokens", "128", "--json"])
    cfg = P.LlmConfig("A100-80GB")
    lat = P.batch_latency_s(L8, cfg, 32, 512, 128)
    assert out["latency_s"] == pytest.approx(lat)
    assert out["tokens_per_s"] == pytest.approx(32 * 640 / lat)
    assert out["fits"] is True
    assert out["weights_gib"] == pytest.approx(8.030e9 * 2 / GIB) == pytest.approx(14.957, abs=1e-3)
    assert out["kv_cache_gib"] == pytest.approx(32 * 640 * 131072 / GIB) == pytest.approx(2.5)
    mem = P.memory(L8, cfg)
    assert out["memory_gib"] == pytest.approx(mem.weights_gib + mem.workspace_gib + 2.5)
    assert out["max_batch"] == P.max_batch(L8, cfg, 512, 128)


def test_predict_with_a_config_json_equals_the_catalogue_model(capsys, tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
           "intermediate_size": 14336, "params_b": 8.030}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    args = ["--gpu", "H100-80GB", "--tp", "2", "--batch", "8", "--input-tokens", "1024",
            "--output-tokens", "256", "--engine", "tensorrt-llm", "--dtype", "bf16", "--json"]
    a = run_json(capsys, ["llm", "predict", "--model-config", str(f), *args])
    b = run_json(capsys, ["llm", "predict", "--model", "Llama-3-8B", *args])
    for k in ("latency_s", "tokens_per_s", "memory_gib", "fits", "max_batch"):
        assert a[k] == pytest.approx(b[k]), k
    lat = P.batch_latency_s(L8, P.LlmConfig("H100-80GB", tp=2, dtype="bf16", engine="tensorrt-llm"),
                            8, 1024, 256)
    assert a["latency_s"] == pytest.approx(lat)


def test_predict_says_when_a_model_does_not_fit(capsys):
    out = run_json(capsys, ["llm", "predict", "--model", "Llama-3-70B", "--gpu", "A100-80GB",
                            "--batch", "1", "--input-tokens", "128", "--output-tokens", "128",
                            "--json"])
    # not applicable, so null (as memory_gib): 0 would read as a measured zero
    assert out["fits"] is False and out["memory_gib"] is None and out["tokens_per_s"] is None
    assert "weights 131.4 GiB" in out["reason"]


def test_predict_books_an_mps_shares_part_of_the_memory_as_the_placer_does(capsys):
    # 0.25 of an A100-80GB's 80 GiB = 20 GiB pinned (llm plan's 0.25 row books the same):
    # the same answer as that limit given explicitly, and a smaller KV cache than the whole GPU
    args = ["llm", "predict", "--model", "Llama-3-8B", "--gpu", "A100-80GB", "--batch", "8",
            "--input-tokens", "512", "--output-tokens", "128", "--json", "--mps-share", "0.25"]
    share = run_json(capsys, args)
    explicit = run_json(capsys, args + ["--memory-limit-gib", "20"])
    whole = run_json(capsys, args + ["--memory-limit-gib", "80"])
    assert share["memory_limit_gib"] == 20.0 and share == explicit
    assert share["kv_capacity_tokens"] < whole["kv_capacity_tokens"]


def test_predict_takes_a_mig_profile_in_any_case(capsys):
    args = ["llm", "predict", "--model", "Llama-3-8B", "--gpu", "A100-80GB", "--batch", "1",
            "--input-tokens", "128", "--output-tokens", "128", "--json", "--mig-profile"]
    lower = run_json(capsys, args + ["3g.40gb"])
    upper = run_json(capsys, args + ["3G.40GB"])
    assert upper == lower and lower["mig_profile"] == "3g.40gb" and lower["fits"] is True


@pytest.mark.parametrize("flag, value, allowed", [
    ("--tp", "3", "one of 1, 2, 4, 8 (a replica's GPUs within one node)"),
    ("--tp", "16", "one of 1, 2, 4, 8"),  # as plan: no inter-node figures in the model
    ("--gpu", "A200", "A100-80GB"),
    ("--batch", "0", "an integer >= 1"),
    ("--model", "GPT-9", "Llama-3-8B"),
])
def test_predict_refuses_bad_input_naming_the_flag(capsys, flag, value, allowed):
    argv = {"--model": "Llama-3-8B", "--gpu": "A100-80GB", "--tp": "1", "--batch": "4",
            "--input-tokens": "64", "--output-tokens": "64"}
    argv[flag] = value
    code = main(["llm", "predict", *[x for kv in argv.items() for x in kv], "--json"])
    err = capsys.readouterr().err
    shown = value if value.isdigit() else repr(value)      # ints print as ints
    assert code == 2 and f"{flag}: {shown} is not allowed" in err and allowed in err, err


def test_model_names_are_matched_ignoring_case(capsys):
    # a fresh user typed llama-2-7b (the catalogue's Llama-2-7B): same answer as the exact name
    args = ["--gpu", "A100-80GB", "--tp", "1", "--batch", "4", "--input-tokens", "64",
            "--output-tokens", "64", "--json"]
    a = run_json(capsys, ["llm", "predict", "--model", "llama-2-7b", *args])
    b = run_json(capsys, ["llm", "predict", "--model", "Llama-2-7B", *args])
    assert a["model"] == b["model"] == "Llama-2-7B" and a["latency_s"] == b["latency_s"]
    # Hugging Face ids too, in any case; an exact alias spelling wins first
    assert P.find_llm_model("META-LLAMA/LLAMA-2-7B-HF").name == "Llama-2-7B"
    assert P.find_llm_model("bloom-176b").name == "BLOOM-176B"  # an alias and a name, one model
    # an unknown name keeps the error listing the catalogue
    assert main(["llm", "predict", "--model", "llama-2-8b", *args]) == 2
    err = capsys.readouterr().err
    assert "--model: 'llama-2-8b' is not allowed (one of Llama-2-7B," in err, err


def test_gpu_names_are_matched_ignoring_case(capsys):
    # a fresh user typed --gpu a100-80gb (the catalogue's A100-80GB): the same answer, and the
    # output names the catalogue's spelling; aliases too (h100-sxm5 is H100-SXM5)
    args = ["--model", "Llama-2-7B", "--tp", "1", "--batch", "4", "--input-tokens", "64",
            "--output-tokens", "64", "--json"]
    a = run_json(capsys, ["llm", "predict", "--gpu", "a100-80gb", *args])
    b = run_json(capsys, ["llm", "predict", "--gpu", "A100-80GB", *args])
    assert a["gpu"] == b["gpu"] == "A100-80GB" and a["latency_s"] == b["latency_s"]
    assert run_json(capsys, ["llm", "predict", "--gpu", "h100-sxm5", *args])["gpu"] == "H100-SXM5"
    # NVML product names (the error message offers them) and surrounding spaces too
    assert run_json(capsys, ["llm", "predict", "--gpu", "nvidia a100-sxm4-80gb", *args])[
        "latency_s"] == a["latency_s"]
    assert run_json(capsys, ["llm", "predict", "--gpu", " a100-80gb ", *args])["gpu"] == "A100-80GB"
    p = run_json(capsys, ["llm", "plan", "--model", "Llama-3-8B", "--requests", "512:128x10",
                          "--gpu", "a100-40gb", "--json"])
    assert {r["gpu"] for r in p["configurations"]} == {"A100-40GB"}
    # an unknown name keeps the catalogue's error, naming the flag and the value as typed
    assert main(["llm", "predict", "--gpu", "a100-99gb", *args]) == 2
    assert "--gpu: 'a100-99gb' is not allowed (a GPU model of the catalogue" in \
        capsys.readouterr().err


def test_a_name_matching_several_models_ignoring_case_is_refused(monkeypatch):
    from dataclasses import replace
    from types import MappingProxyType

    from elastico.errors import InvalidArgument

    # two catalogue names that differ only in case (none do in the bundled catalogue)
    twin = replace(L8, name="LLAMA-3-8B")
    monkeypatch.setattr(P, "LLM_MODELS", MappingProxyType({**P.LLM_MODELS, twin.name: twin}))
    assert P.find_llm_model("LLAMA-3-8B") is twin and P.find_llm_model("Llama-3-8B") is L8
    with pytest.raises(InvalidArgument) as e:
        P.find_llm_model("llama-3-8b")
    assert e.value.field == "model" and "Llama-3-8B" in e.value.allowed


def _fits(model, row_cfg, work) -> bool:
    if not P.memory(model, row_cfg).fits:
        return False
    return all(P.max_batch(model, row_cfg, i, o) >= 1 for i, o in work)


def test_plan_never_offers_a_configuration_that_does_not_fit(capsys):
    out = run_json(capsys, ["llm", "plan", "--model", "Llama-3-70B", "--tokens", "1e8",
                            "--gpu", "A100-80GB", "--gpu", "H100-80GB", "--gpu", "A100-40GB",
                            "--mig", "--json"])
    m = P.llm_model("Llama-3-70B")
    from elastico.llm_job import length_distribution

    classes = [(i, o) for i, o, _ in length_distribution("azure-conv")]
    rows = out["configurations"]
    # hand-checked: 131.4 GiB of weights fit no whole GPU at TP 1; TP 2 at 0.75 (54 of 60 GiB
    # usable, 65.7 GiB of weights per GPU) does not fit either
    for r in rows:
        if r["tp"] == 1 and r["mig_profile"] is None:
            assert not r["fits"] and "weights 131.4 GiB" in r["reason"]
        if r["tp"] == 2 and r["share"] == 0.75 and r["gpu"] != "A100-40GB":
            assert not r["fits"] and "exceed the 54.0 GiB" in r["reason"]
    family = out["family"]
    assert family
    for c in family:
        cfg = P.LlmConfig(c["gpu"], tp=c["tp"], replicas=c["replicas"],
                          mps_share=c["share"] if c["share"] < 1 and not c["mig_profile"] else None,
                          mig_profile=c["mig_profile"], memory_limit_gib=c["memory_gib_per_gpu"])
        assert _fits(m, cfg, classes), c
        # and it is one of the rows that fit, with the same per-GPU memory
        assert any(r["fits"] and r["gpu"] == c["gpu"] and r["tp"] == c["tp"]
                   and r["memory_gib_per_gpu"] == c["memory_gib_per_gpu"] for r in rows), c
    assert not any(c["gpu"] == "A100-40GB" and c["tp"] < 4 for c in family)
    assert out["job"]["tp"] == 2 and out["job"]["reference_gpu"] == "A100-80GB"


def test_plan_prints_tables_and_tokens_per_s_from_the_model(capsys):
    assert main(["llm", "plan", "--model", "Llama-3-8B", "--requests", "512:128x1000",
                 "--gpu", "A100-80GB"]) == 0
    text = capsys.readouterr().out
    assert "shape family" in text and "A100-80GB x1 @1.00 tp1" in text
    assert "requested tp 1 x 1 replica(s), reference A100-80GB" in text
    t = P.batch_latency_s(L8, P.LlmConfig("A100-80GB", memory_limit_gib=80.0), 1000, 512, 128)
    assert f"{1000 * 640 / t:,.0f} tokens/s" in text


def test_plan_refuses_bad_work_naming_the_flag(capsys):
    # the work is one of --tokens and --requests: argparse names what is missing or clashes
    with pytest.raises(SystemExit) as e:
        main(["llm", "plan", "--model", "Llama-3-8B", "--gpu", "A100-80GB"])
    assert e.value.code == 2
    assert "one of the arguments --tokens --requests is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["llm", "plan", "--model", "Llama-3-8B", "--tokens", "1e6", "--requests", "1:1x1"])
    assert e.value.code == 2
    assert "argument --requests: not allowed with argument --tokens" in capsys.readouterr().err
    # a budget at the limit that whole requests round past it: the flag given, not --lengths
    assert main(["llm", "plan", "--model", "Llama-3-8B", "--tokens", "1e13"]) == 2
    err = capsys.readouterr().err
    assert "--tokens: 10000000000000.0 is not allowed (at most 1e+13 tokens once" in err
    assert main(["llm", "plan", "--model", "Llama-3-8B", "--requests",
                 "1048576:1048576x1000000000"]) == 2
    assert "--requests: '1048576:1048576x1000000000' is not allowed (work.tokens" in \
        capsys.readouterr().err
    assert main(["llm", "plan", "--model", "Llama-3-8B", "--tokens", "1e6",
                 "--lengths", "azure-chat"]) == 2
    assert "--lengths: 'azure-chat' is not allowed" in capsys.readouterr().err
    assert main(["llm", "plan", "--model", "Llama-3-8B", "--tokens", "1e6", "--gpu", "G2"]) == 2
    assert "--gpu: 'G2' is not allowed" in capsys.readouterr().err


def test_plan_shows_no_speed_for_a_configuration_that_does_not_fit(capsys):
    # Llama-2-70B's 128.5 GiB of fp16 weights fit no single A100-80GB: that row has no
    # tokens/s ("-", not 0), the tp-2 whole-GPU row has one
    assert main(["llm", "plan", "--model", "Llama-2-70B", "--tokens", "1e6",
                 "--gpu", "A100-80GB"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("A100-80GB ") and line.split()[1].isdigit()]
    by = {(r[1], r[2]): r for r in rows}
    assert by[("1", "1.00")][5:7] == ["-", "no:"]
    assert by[("2", "1.00")][6] == "yes" and float(by[("2", "1.00")][5].replace(",", "")) > 0


@pytest.mark.parametrize("extra, message", [
    (["--mps-share", "0"], "--mps-share: 0.0 is not allowed (a fraction in (0, 1] (leave "
                           "--mps-share out for the whole GPU))"),
    (["--mps-share", "0.5", "--mig-profile", "3g.40gb"],
     "--mps-share: 0.5 is not allowed (left out with --mig-profile"),
])
def test_predict_errors_speak_of_flags_not_of_none(capsys, extra, message):
    code = main(["llm", "predict", "--model", "Llama-3-8B", "--gpu", "A100-80GB", "--batch", "4",
                 "--input-tokens", "64", "--output-tokens", "64", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "None" not in err, err


@pytest.mark.parametrize("extra, message", [
    (["--gpu", "A100-40GB", "--memory-limit-gib", "1000"],
     "--memory-limit-gib: 1000.0 is not allowed (at most A100-40GB's 40 GiB)"),
    (["--gpu", "A100-80GB", "--mig-profile", "3g.40gb", "--memory-limit-gib", "60"],
     "(at most the 40 GiB of a 3g.40gb instance of A100-80GB)"),
    (["--gpu", "T4", "--mig-profile", "1g.5gb"], "(leave --mig-profile out: T4 has no MIG)"),
])
def test_predict_refuses_what_it_would_not_apply(capsys, extra, message):
    # a memory limit above the GPU (or instance) used to be shown but clamped silently
    code = main(["llm", "predict", "--model", "Llama-3-8B", "--batch", "4",
                 "--input-tokens", "64", "--output-tokens", "64", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "None" not in err, err


def test_a_model_that_does_not_fit_has_no_kv_cache_figure(capsys):
    out = run_json(capsys, ["llm", "predict", "--model", "Llama-3-70B", "--gpu", "A100-80GB",
                            "--batch", "1", "--input-tokens", "128", "--output-tokens", "128",
                            "--json"])
    assert out["fits"] is False and out["kv_cache_gib"] is None


def test_a_reader_that_goes_away_gets_no_traceback():
    # `elastico llm plan ... | head -1`: the pipe closes while the tables are printed
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "elastico", "llm", "plan", "--model", "Llama-3-8B",
                          "--tokens", "1e9"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()  # before the rest is written: the writes that follow hit a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) in (0, 141) and "Traceback" not in err and "BrokenPipe" not in err, err
