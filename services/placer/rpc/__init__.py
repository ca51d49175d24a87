"""The placer's gRPC adapters: wire codecs between the Placer API's messages and the plain
round data (:mod:`~elastico.placer.rpc.wire`) and the placer that prices and predicts
through remote services (:mod:`~elastico.placer.rpc.remote`)."""
