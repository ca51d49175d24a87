"""Generated protobuf and gRPC modules of the kubelet device plugin API v1beta1
(``v1beta1.Registration``, ``v1beta1.DevicePlugin``), vendored from kubernetes/kubelet
(see PROVENANCE.md beside the proto)."""
