"""The node agent's gRPC clients (adapters): :mod:`elastico.nodeagent.rpc.predictor`."""
