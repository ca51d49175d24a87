"""ElastiCo: share GPUs between DL training and offline LLM inference on Kubernetes.

Core package: the shared model (:mod:`elastico.model`), Resource Shape Transformation
(:mod:`elastico.shapes`, :mod:`elastico.perf.throughput`), the bundled trace
(:mod:`elastico.trace`), the trace-driven simulator (:mod:`elastico.sim.simulator`) and the CLI
(:mod:`elastico.cli`).  Components live in sub-packages built from ``services/``:
:mod:`elastico.pricing`, :mod:`elastico.predictor`, :mod:`elastico.placer`,
:mod:`elastico.nodeagent`.
"""

__version__ = "0.1.0"
