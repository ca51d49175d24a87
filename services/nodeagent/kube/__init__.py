"""The node agent's Kubernetes adapters: the kubelet device plugin
(:mod:`~elastico.nodeagent.kube.deviceplugin`) and the API-server client
(:mod:`~elastico.nodeagent.kube.client`)."""
