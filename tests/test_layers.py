"""The house's layering rule, stated once, by folder (docs/README.md, "The map").

Layers, lowest first; a module imports only from its own layer or the ones below it, and the
services of one layer never import each other:

====  ==========================================  ===================================================
rank  folder (import name)                        what lives there
====  ==========================================  ===================================================
0     ``elastico/*.py``, ``elastico/perf/``        core: plain data, errors, the annotation contract,
                                                  GPU facts, MIG geometry, shapes, performance models
1     ``elastico/runtime/``                       process plumbing: gRPC server, telemetry, metrics
2     ``services/pricing``, ``services/predictor``  the pricing and prediction services
3     ``services/placer``, ``services/nodeagent``   the placer (uses pricing, predictor) and node agent
4     ``elastico/sim/``                           simulator and evaluation (drive the placer)
5     ``elastico/cli/``                           the composition root: every command
====  ==========================================  ===================================================

Adapters -- the only code that may import ``grpc``, ``kubernetes`` or the generated messages
-- live in adapter places: ``elastico/runtime/``, ``elastico/cli/``, and in each service its
``server.py``, ``rpc/`` and ``kube/``.  Code outside them never imports a module that (directly
or through others) imports those, so the algorithms run without gRPC or Kubernetes.  Only the
two kernel wrappers touch the native extension.  Checked on the source with ``ast``, so it holds
for every file, imported by a test or not.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import-name prefix -> source folder (pyproject.toml's wheel.packages)
PACKAGES = {"elastico.pricing": "services/pricing", "elastico.predictor": "services/predictor",
            "elastico.placer": "services/placer", "elastico.nodeagent": "services/nodeagent",
            "elastico": "elastico"}
#: layer (an import-name prefix; the longest matching one decides) -> (rank, group): a module
#: may import its own group and any lower rank; groups of one rank are peers that may not
LAYERS = {"elastico": (0, "core"), "elastico.perf": (0, "core"), "elastico.runtime": (1, "runtime"),
          "elastico.pricing": (2, "pricing"), "elastico.predictor": (2, "predictor"),
          "elastico.placer": (3, "placer"), "elastico.nodeagent": (3, "nodeagent"),
          "elastico.sim": (4, "sim"), "elastico.cli": (5, "cli"),
          "elastico.__main__": (5, "cli")}  # ``python -m elastico``: the command line
EXTERNAL_ADAPTER_ROOTS = ("grpc", "kubernetes", "elastico.v1", "elastico.deviceplugin")
NATIVE = "elastico._native"


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    for name, folder in sorted(PACKAGES.items(), key=lambda kv: -len(kv[1])):
        if str(rel).startswith(folder + "/"):
            parts = name.split(".") + list(rel.relative_to(folder).parts)
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(path)


@lru_cache(maxsize=None)
def all_modules() -> dict[str, Path]:
    return {module_of(p): p for folder in set(PACKAGES.values())
            for p in (ROOT / folder).glob("**/*.py")}


def layer(module: str) -> str:
    return max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)


def is_adapter_place(module: str) -> bool:
    """elastico.runtime.*, elastico.cli.*, a service's server module, or its rpc/kube folders."""
    parts = module.split(".")
    if LAYERS[layer(module)][1] in ("runtime", "cli"):
        return True
    return (layer(module) in ("elastico.pricing", "elastico.predictor", "elastico.placer",
                              "elastico.nodeagent")
            and len(parts) >= 3 and parts[2] in ("server", "rpc", "kube"))


@lru_cache(maxsize=None)
def imports(module: str) -> frozenset[str]:
    """Modules ``module`` imports (absolute and relative; ``from a import b`` counts as
    ``a.b`` when that is a module, else ``a``); external ones by their dotted name."""
    mods = all_modules()
    path = mods[module]
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")
                up = up[:len(up) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:  # a name, or a module (the extension, generated messages)
                out |= {base, f"{base}.{a.name}"} - ({base} if f"{base}.{a.name}" in mods else set())
    return frozenset(out)


def is_external_adapter(name: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in EXTERNAL_ADAPTER_ROOTS)


@lru_cache(maxsize=None)
def pulls_in_adapters(module: str) -> bool:
    """Whether importing ``module`` imports grpc, kubernetes or generated messages, directly
    or through the project's modules it imports."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for dep in imports(m):
            if is_external_adapter(dep):
                return True
            if dep in all_modules():
                todo.append(dep)
    return False


def project_imports(module: str) -> list[str]:
    return sorted(d for d in imports(module) if d in all_modules() and d != module)


MODULES = sorted(all_modules())


def test_every_source_file_has_a_layer():
    assert len(MODULES) > 80
    assert all(layer(m) in LAYERS for m in MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_imports_go_only_downward(module):
    rank, group = LAYERS[layer(module)]
    bad = [d for d in project_imports(module)
           if LAYERS[layer(d)][0] > rank or (LAYERS[layer(d)][0] == rank
                                             and LAYERS[layer(d)][1] != group)]
    assert not bad, f"{module} (layer {group}) imports {bad} from a layer above or beside it"


@pytest.mark.parametrize("module", [m for m in MODULES if not is_adapter_place(m)])
def test_code_outside_adapters_never_pulls_in_grpc_or_kubernetes(module):
    bad = sorted(d for d in imports(module)
                 if is_external_adapter(d) or (d in all_modules() and pulls_in_adapters(d)))
    assert not bad, f"{module} imports {bad}, which bring grpc/kubernetes in"


def test_the_rule_catches_a_violation():
    """The checks above are not vacuous: the placer's gRPC server is an adapter place that
    pulls grpc in, and the pricing solver is not and does not."""
    assert is_adapter_place("elastico.placer.server") and pulls_in_adapters("elastico.placer.server")
    assert is_adapter_place("elastico.nodeagent.kube.deviceplugin")
    assert not is_adapter_place("elastico.pricing.solver")
    assert not pulls_in_adapters("elastico.pricing.solver")
    assert LAYERS[layer("elastico.sim.simulator")] > LAYERS[layer("elastico.placer.round")]


def test_only_the_two_kernel_wrappers_import_the_native_extension():
    """The C++ extension is reached through one thin module per kernel: pricing's
    (services/pricing/kernel.py) and the FGD fragmentation summaries
    (services/placer/fragmentation.py); everything else calls those."""
    users = sorted(m for m in MODULES
                   if any(d == NATIVE or d.startswith(NATIVE + ".") for d in imports(m)))
    assert users == ["elastico.placer.fragmentation", "elastico.pricing.kernel"]
