"""Generated modules of the vendored kubelet device plugin API (built from protos/)."""
