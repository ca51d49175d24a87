"""The ``elastico`` command line.

Subcommands register themselves (``register(subparsers)``) so each component owns its CLI:

* ``elastico simulate`` -- replay the bundled Alibaba GPU trace (or a given one) through a
  scheduling policy and print the summary table (:mod:`elastico.cli.simulate`).
* ``elastico evaluate`` -- every policy on the trace and MIG clusters over several seeds,
  written up as docs/evaluation/report.md with plots and results.json
  (:mod:`elastico.cli.evaluate`).
* ``elastico pricing solve`` -- solve one MMKP instance with Elastic Shadow Pricing
  (:mod:`elastico.cli.pricing`).
* ``elastico predictor train|evaluate|retrain|convert-gavel`` -- the interference
  predictor (:mod:`elastico.cli.predictor`).
* ``elastico llm plan|predict`` -- the offline LLM inference model: a job's shape family,
  one batch's latency, tokens/s and memory (:mod:`elastico.cli.llm`).
* ``elastico schedule`` -- the Kubernetes scheduler loop (:mod:`elastico.cli.schedule`, an
  adapter like ``serve``).
* ``elastico nodeagent`` -- the node-agent DaemonSet process (:mod:`elastico.cli.nodeagent`, an
  adapter).
* ``elastico serve SERVICE`` -- run one gRPC service (:mod:`elastico.cli.serve`, an adapter:
  this module is the composition root and the only non-adapter allowed to import it).
* ``elastico up`` -- every service as its own process on loopback (:mod:`elastico.cli.up`).

Exit status: 0 success, 2 bad input (the message names the field and the value), 3 no
feasible choice (``pricing solve`` on an instance without zero configurations), 1 any other
failure.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from elastico import __version__
from elastico.errors import ElasticoError


def count_of(n: int, one: str, many: str | None = None) -> str:
    """``"1 GPU"``, ``"2 GPUs"``; ``many`` for irregular plurals (``"2 policies"``): the
    one wording every command's progress and summary lines use."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def build_parser() -> argparse.ArgumentParser:
    from elastico.cli import evaluate as evaluate_cli
    from elastico.cli import llm as llm_cli
    from elastico.cli import nodeagent as nodeagent_cli
    from elastico.cli import predictor as predictor_cli
    from elastico.cli import pricing as pricing_cli
    from elastico.cli import schedule as schedule_cli
    from elastico.cli import serve as serve_cli
    from elastico.cli import simulate as simulate_cli
    from elastico.cli import up as up_cli

    p = argparse.ArgumentParser(
        prog="elastico",
        description="ElastiCo: share GPUs between DL training and offline LLM inference "
                    "(Resource Shape Transformation, Elastic Shadow Pricing, "
                    "Interference-Aware Co-location).",
    )
    p.add_argument("--version", action="version", version=f"elastico {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    simulate_cli.register(sub)
    evaluate_cli.register(sub)
    pricing_cli.register(sub)
    predictor_cli.register(sub)
    llm_cli.register(sub)
    serve_cli.register(sub)
    schedule_cli.register(sub)
    nodeagent_cli.register(sub)
    up_cli.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    tracer = None
    if args.command == "simulate":  # one trace per round when OTEL_* asks (docs/api.md)
        from elastico.runtime.telemetry import OtelTracer, configure

        tracer = args.tracer = configure("elastico-simulate")
        if getattr(args, "via_grpc", None) is not None:  # rounds through the services
            from elastico.cli.up import ViaGrpc

            args.via_grpc_factory = ViaGrpc
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a reader gone away is a BrokenPipeError below
        return code
    except ElasticoError as e:
        print(f"elastico: error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"elastico: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("elastico: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (``elastico llm plan | head``): no traceback; stdout goes to
        # devnull so that the interpreter's final flush does not raise again (Python docs,
        # "Note on SIGPIPE")
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a process killed by it
    finally:
        if tracer is not None and isinstance(tracer, OtelTracer):
            tracer.shutdown()  # flush the spans still queued


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
