"""Exercise the real NVML backend on a GPU machine and print one JSON object (not a test: needs
an NVIDIA driver; nothing here changes the GPU).

    python bench/gpu_check.py            # enumerate, telemetry, MIG mode and instances

Keys: ``gpus`` (index, uuid, model, memory_gib, healthy, mig_mode, mig_model), ``telemetry``
(per index, TELEMETRY_KEYS; NaN -> null), ``mig_devices`` (per MIG-mode GPU), ``health_wait_s``
(seconds one 0.2 s wait_health_event took: the XID/ECC event set works when it returns),
``errors`` (what failed, by step).  Without a driver: ``{"available": false, "reason": ...}``
and exit status 2.
"""

from __future__ import annotations

import json
import math
import sys
import time


def main() -> int:
    from elastico.nodeagent import BackendUnavailable, NvmlGpuBackend

    try:
        b = NvmlGpuBackend()
    except BackendUnavailable as e:
        print(json.dumps({"available": False, "reason": str(e)}))
        return 2
    out: dict = {"available": True, "errors": {}}
    try:
        gpus = b.list_gpus()
        out["gpus"] = [dict(index=g.index, uuid=g.uuid, model=g.model, memory_gib=round(g.memory_total_gib, 3),
                            healthy=g.healthy, mig_mode=g.mig_mode, mig_model=g.mig_model) for g in gpus]
        out["telemetry"] = {}
        for g in gpus:
            try:
                t = b.telemetry(g.index)
                out["telemetry"][g.index] = {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                             for k, v in t.items()}
            except Exception as e:  # noqa: BLE001 - report, keep going
                out["errors"][f"telemetry[{g.index}]"] = f"{type(e).__name__}: {e}"
            if g.mig_mode:
                try:
                    out.setdefault("mig_devices", {})[g.index] = [d.__dict__ for d in b.mig_devices(g.index)]
                except Exception as e:  # noqa: BLE001
                    out["errors"][f"mig_devices[{g.index}]"] = f"{type(e).__name__}: {e}"
        t0 = time.perf_counter()
        b.wait_health_event(0.2)
        out["health_wait_s"] = round(time.perf_counter() - t0, 3)
        out["unhealthy"] = b.unhealthy_reasons()
    finally:
        b.close()
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no options
    sys.exit(main())
