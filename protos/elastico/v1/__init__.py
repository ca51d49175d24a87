"""Generated protobuf and gRPC modules of the elastico.v1 wire contract (built from protos/)."""
