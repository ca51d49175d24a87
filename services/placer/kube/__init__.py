"""The live Kubernetes scheduler: ``elastico.io/*`` pods in, Bindings and Events out.

* :mod:`.annotations` -- the pod-facing API (validation, decision annotations); pure.
* :mod:`.inventory` -- Nodes and their ``elastico.io/gpu-inventory`` -> model nodes; pure.
* :mod:`.bookings` -- the book rebuilt from pods every round; pure.
* :mod:`.leader` -- ``coordination.k8s.io`` Lease leader election (adapter).
* :mod:`.informer` -- list+watch caches with relist and resync (adapter).
* :mod:`.events` -- de-duplicated pod Events (adapter).
* :mod:`.loop` -- the round: book, jobs, decisions, binding (adapter).
* :mod:`.health` -- the loop's gRPC health endpoint (adapter).

Only the adapters import ``kubernetes`` (tests/test_layers.py checks it).
"""
