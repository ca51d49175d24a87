"""The simulator and the evaluation (layer 4 of docs/README.md's map): the Alibaba trace's
clusters (:mod:`~elastico.sim.clusters`) and workloads (:mod:`~elastico.sim.workload`), the
event-driven simulator that drives the placer's round code as the live loop does
(:mod:`~elastico.sim.simulator`), the utilisation ceiling, the multi-run evaluation and its
report.  Imports the services and the core below it; knows nothing of gRPC or Kubernetes."""
