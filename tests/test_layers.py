"""Layering (STYLE.md 7): the algorithm code knows nothing of gRPC or Kubernetes, and only the
pricing kernel module touches the native extension.  Checked on the source with ``ast``, so
it holds for every file, imported by a test or not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALGORITHM = ["elastico", "services/pricing", "services/placer", "services/predictor",
             "services/nodeagent"]
FORBIDDEN = ("grpc", "kubernetes", "elastico.v1")
#: The gRPC adapters that live beside the algorithm code: the only files in ALGORITHM folders
#: allowed to import grpc and the generated ``elastico.v1`` messages (STYLE.md 8: thin
#: servicers, one error mapping).  Listed one by one so that a new file is checked by default.
ADAPTERS = {"services/pricing/server.py", "services/predictor/server.py", "elastico/grpc_errors.py",
            "elastico/grpc_server.py", "elastico/serve_cli.py", "elastico/telemetry.py",
            "services/placer/kube/loop.py", "services/placer/kube/leader.py",
            "services/placer/kube/informer.py", "services/placer/kube/events.py",
            "services/placer/kube/health.py",
            "elastico/schedule_cli.py",
            "services/nodeagent/server.py", "services/nodeagent/deviceplugin.py",
            "services/nodeagent/kube_client.py", "elastico/nodeagent_cli.py",
            "services/placer/server.py", "services/placer/remote.py", "services/placer/wire.py",
            "elastico/up_cli.py"}
#: ... and their import names: algorithm code must not import them either (that would pull
#: grpc in through the back door).
ADAPTER_MODULES = {"elastico.pricing.server", "elastico.predictor.server", "elastico.grpc_errors",
                   "elastico.grpc_server", "elastico.serve_cli", "elastico.telemetry",
                   "elastico.placer.kube.loop", "elastico.placer.kube.leader",
                   "elastico.placer.kube.informer", "elastico.placer.kube.events",
                   "elastico.placer.kube.health",
                   "elastico.schedule_cli",
                   "elastico.nodeagent.server", "elastico.nodeagent.deviceplugin",
                   "elastico.nodeagent.kube_client", "elastico.nodeagent_cli",
                   "elastico.placer.server", "elastico.placer.remote", "elastico.placer.wire",
                   "elastico.up_cli"}
#: The composition root: the command line wires adapters in (``elastico serve``) but, like
#: algorithm code, never imports grpc itself.
ROOTS = {"elastico/cli.py": {"elastico.serve_cli", "elastico.schedule_cli", "elastico.nodeagent_cli",
                             "elastico.up_cli", "elastico.up_cli.ViaGrpc",
                             "elastico.telemetry",
                             "elastico.telemetry.OtelTracer", "elastico.telemetry.configure"}}


def imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("**/*.py"))


def test_every_adapter_exists():
    assert sorted(a for a in ADAPTERS if not (ROOT / a).is_file()) == []


@pytest.mark.parametrize("folder", ALGORITHM)
def test_algorithm_code_imports_no_grpc_or_kubernetes(folder):
    files = sources(folder)
    assert files, folder
    for f in files:
        if str(f.relative_to(ROOT)) in ADAPTERS:
            continue
        allowed = ROOTS.get(str(f.relative_to(ROOT)), set())
        bad = sorted(m for m in imports(f) if m.split(".")[0] in ("grpc", "kubernetes")
                     or m.startswith("elastico.v1")
                     or (m in ADAPTER_MODULES and m not in allowed))
        assert not bad, f"{f.relative_to(ROOT)} imports {bad}"


def test_only_the_two_kernel_wrappers_import_the_native_extension():
    """The C++ extension is reached through one thin module per kernel: pricing's
    (services/pricing/kernel.py) and the FGD fragmentation summaries
    (services/placer/fragmentation.py); everything else calls those."""
    users = sorted(str(f.relative_to(ROOT)) for folder in ALGORITHM + ["services/nodeagent"]
                   for f in sources(folder)
                   if any(m == "elastico._native" or m.startswith("elastico._native.")
                          for m in imports(f)))
    # fragmentation.py: the only caller of the FGD fragmentation kernel (native/frag.hpp)
    assert users == ["services/placer/fragmentation.py", "services/pricing/kernel.py"]
