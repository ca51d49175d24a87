"""The Kubernetes manifests in k8s/ (issue 7 item 5, issue 9 item 4), checked with no cluster.

* Assembly: :func:`load_kustomization` builds what ``kubectl apply -k k8s/`` applies (every
  file kustomization.yaml lists, its ConfigMap generator and image override); it refuses any
  kustomize feature it does not emulate, and, where kubectl is installed, is compared with
  ``kubectl kustomize``.
* Schemas: every object validates (strict: unknown fields are errors) against the OpenAPI
  schemas of Kubernetes :data:`K8S_VERSION`, shipped offline by ``kubernetes-validate``.
* Security: control-plane pods non-root, read-only root filesystem, no capabilities, no
  privilege escalation, RuntimeDefault seccomp; the node agent's every privilege carries a
  ``why:`` comment and nothing beyond a fixed list is granted.
* Wiring: probes, Services, PDBs, ConfigMap TOML (loaded by the real config loader), TLS
  Secret names and certificate DNS names agree with each other.
* NetworkPolicy: a small evaluator of the Kubernetes NetworkPolicy semantics runs every pair of
  pods (and outside callers) through the policies; the allowed flows must be exactly the
  intended ones.
"""

from __future__ import annotations

import copy
import ipaddress
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
#: The Kubernetes version the manifests are validated against (schemas shipped offline).
K8S_VERSION = "1.31"
SYSTEM_NS = "elastico-system"
NODE_NS = "elastico-node"
#: component -> (namespace, gRPC port) as in elastico/runtime/serve_config.py's DEFAULT_PORTS.
COMPONENTS = {"pricing": (SYSTEM_NS, 50051), "predictor": (SYSTEM_NS, 50052),
              "placer": (SYSTEM_NS, 50053), "nodeagent": (NODE_NS, 50054)}
#: The processes that serve gRPC (with health) in the cluster: ``elastico serve`` for pricing
#: and predictor, ``elastico nodeagent``, and ``elastico schedule`` (the placer: health only).
GRPC_SERVERS = ("pricing", "predictor", "placer", "nodeagent")
#: The components something calls, each behind a Service; nothing calls the placer.
CALLED = ("pricing", "predictor", "nodeagent")
#: The processes with a Prometheus port (``--metrics-port`` via the TOML file).
METRICS_SERVERS = ("pricing", "predictor", "placer")
METRICS_PORT = 9090

_EMULATED_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator", "images"}
_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ClusterIssuer"}


# --- assembly --------------------------------------------------------------------------------

def load_yaml_docs(path: Path) -> list[dict]:
    """Every non-empty YAML document of ``path``."""
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_kustomization(directory: Path) -> list[dict]:
    """The objects ``kustomize build directory`` yields, for the features these manifests use:
    ``resources`` (files), ``configMapGenerator`` (files, per-generator namespace, no hash
    suffix) and ``images`` (newName/newTag).  Any other key fails, so the emulation can never
    silently differ from kustomize."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kust) - _EMULATED_KEYS
    assert not unknown, f"{directory}/kustomization.yaml uses {sorted(unknown)}, which " \
                        f"load_kustomization does not emulate; extend it first"
    objs: list[dict] = []
    for res in kust.get("resources", []):
        path = directory / res
        assert path.is_file(), f"kustomization lists {res}, which is not a file"
        objs.extend(load_yaml_docs(path))
    for gen in kust.get("configMapGenerator", []):
        assert set(gen) <= {"name", "namespace", "files", "options"}, gen
        assert gen.get("options") == {"disableNameSuffixHash": True}, \
            "the emulation makes no hash suffix: keep disableNameSuffixHash"
        data = {}
        for f in gen["files"]:
            key, _, src = f.partition("=") if "=" in f else (Path(f).name, "", f)
            data[key] = (directory / src).read_text()
        meta = {"name": gen["name"]}
        if "namespace" in gen:
            meta["namespace"] = gen["namespace"]
        objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    for img in kust.get("images", []):
        for c in _all_containers(objs):
            name, _, tag = c["image"].partition(":")
            if name == img["name"]:
                c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    return objs


def _pod_spec(obj: dict) -> dict | None:
    if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
        return obj["spec"]["template"]["spec"]
    if obj["kind"] == "Pod":
        return obj["spec"]
    return None


def _all_containers(objs: Iterable[dict]) -> list[dict]:
    out = []
    for o in objs:
        spec = _pod_spec(o)
        if spec:
            out += spec.get("initContainers", []) + spec["containers"]
    return out


@pytest.fixture(scope="module")
def objs() -> list[dict]:
    return load_kustomization(K8S)


def find(objs: list[dict], kind: str, name: str, namespace: str | None = None) -> dict:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name
            and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(hits) == 1, f"{kind} {namespace}/{name}: {len(hits)} found"
    return hits[0]


def workload(objs: list[dict], component: str) -> dict:
    kind = "DaemonSet" if component == "nodeagent" else "Deployment"
    return find(objs, kind, f"elastico-{component}", COMPONENTS[component][0])


def test_kustomization_lists_every_manifest_file():
    """A manifest added to k8s/ but not to kustomization.yaml would silently never deploy."""
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == listed


def test_assembly_has_the_expected_objects(objs):
    kinds = sorted((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
                   for o in objs)
    assert len(kinds) == len(set(kinds)), "duplicate objects"
    for c in COMPONENTS:
        workload(objs, c)
        find(objs, "ServiceAccount", f"elastico-{c}", COMPONENTS[c][0])
    for c in CALLED:
        find(objs, "Service", f"elastico-{c}", COMPONENTS[c][0])
    assert not [o for o in objs if o["kind"] == "Service"
                and o["metadata"]["name"] == "elastico-placer"], "nothing calls the placer"
    for c in ("pricing", "predictor", "placer"):
        find(objs, "PodDisruptionBudget", f"elastico-{c}", SYSTEM_NS)
    find(objs, "ConfigMap", "elastico-config", SYSTEM_NS)
    for ns in (SYSTEM_NS, NODE_NS):
        find(objs, "Namespace", ns)
        find(objs, "NetworkPolicy", "default-deny", ns)
    for o in objs:
        if o["kind"] in _CLUSTER_SCOPED:
            assert "namespace" not in o["metadata"], o["metadata"]
        else:
            assert o["metadata"].get("namespace") in (SYSTEM_NS, NODE_NS), \
                f"{o['kind']} {o['metadata']['name']} has no ElastiCo namespace"
    assert not [o for o in objs if o["kind"] == "Secret"], "keys never go into git"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_assembly_matches_kubectl_kustomize(objs):
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    theirs = [d for d in yaml.safe_load_all(out.stdout) if d]

    def key(o):
        return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
    assert sorted(map(key, theirs)) == sorted(map(key, objs))
    ours = {key(o): o for o in objs}
    for o in theirs:
        assert o == ours[key(o)], key(o)


# --- schemas ---------------------------------------------------------------------------------

def _validate(obj: dict) -> None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{obj['kind']} {obj['metadata'].get('name')}: {e.message} at "
                    f"{'/'.join(map(str, e.path))}")


def test_every_object_validates_against_the_kubernetes_schemas(objs):
    for o in objs:
        _validate(o)


def test_the_validator_rejects_a_broken_manifest(objs):
    """The schema check can fail: a misspelt field and a wrong type are refused."""
    bad = copy.deepcopy(workload(objs, "pricing"))
    bad["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesysten"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    bad = copy.deepcopy(workload(objs, "pricing"))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


EXAMPLES = sorted((K8S / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_workloads_validate_and_use_elastico(path):
    docs = load_yaml_docs(path)
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert jobs, f"{path.name} has no Job"
    for d in docs:
        _validate(d)
    for job in jobs:
        tmpl = job["spec"]["template"]
        assert tmpl["spec"]["schedulerName"] == "elastico"
        ann = tmpl["metadata"]["annotations"]
        assert ann and all(k.startswith("elastico.io/") for k in ann), ann
        limits = [c.get("resources", {}).get("limits", {}) for c in tmpl["spec"]["containers"]]
        assert any("elastico.io/gpu" in lim for lim in limits), \
            "the container asks the node agent's device plugin for elastico.io/gpu"


def test_examples_cover_training_and_inference_with_valid_annotations():
    """The examples' annotations pass the placer's own strict parser (what the scheduler loop
    would do with them) against the bundled throughput model's GPU models and job types."""
    from elastico.placer.kube.annotations import parse_pod_annotations
    from elastico.perf.throughput import ThroughputModel

    model = ThroughputModel.bundled()
    kinds = set()
    for path in EXAMPLES:
        for d in load_yaml_docs(path):
            if d["kind"] == "Job":
                ann = d["spec"]["template"]["metadata"]["annotations"]
                spec = parse_pod_annotations(ann, gpu_models=model.gpu_models(),
                                             job_types=model.job_types())
                kinds.add(spec.workload.value)
    assert kinds == {"training", "inference"}


def test_cert_manager_certificates_cover_every_tls_secret_and_probe_name(objs):
    """k8s/cert-manager/ makes exactly the Secrets the pods mount, with the DNS names the
    health probes (and the placer) give as TLS server name."""
    cm = load_kustomization(K8S / "cert-manager")
    for o in cm:
        if o["kind"] == "Namespace":
            assert o == find(objs, "Namespace", o["metadata"]["name"]), \
                "cert-manager/namespaces.yaml drifted from namespace.yaml"
        else:
            assert o["apiVersion"] == "cert-manager.io/v1", o["kind"]
    certs = {(c["metadata"]["namespace"], c["spec"]["secretName"]): c for c in cm
             if c["kind"] == "Certificate" and not c["spec"].get("isCA")}
    for comp in GRPC_SERVERS:
        ns = COMPONENTS[comp][0]
        spec = _pod_spec(workload(objs, comp))
        secret = next(v["secret"]["secretName"] for v in spec["volumes"] if v["name"] == "tls")
        cert = certs.get((ns, secret))
        assert cert is not None, f"no Certificate makes {ns}/{secret}"
        assert {"server auth", "client auth"} <= set(cert["spec"]["usages"])
        cmd = spec["containers"][0]["readinessProbe"]["exec"]["command"]
        server_name = next(a.split("=", 1)[1] for a in cmd if a.startswith("-tls-server-name="))
        assert server_name in cert["spec"]["dnsNames"]
        assert server_name == f"elastico-{comp}.{ns}.svc"


# --- security --------------------------------------------------------------------------------

def _control_plane(objs):
    return [o for o in objs if _pod_spec(o) and o["metadata"]["namespace"] == SYSTEM_NS]


def test_control_plane_namespace_enforces_restricted_pod_security(objs):
    labels = find(objs, "Namespace", SYSTEM_NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_control_plane_pods_are_non_root_read_only_and_capability_free(objs):
    cp = _control_plane(objs)
    assert {o["metadata"]["name"] for o in cp} == {
        "elastico-pricing", "elastico-predictor", "elastico-placer"}
    for o in cp:
        spec = _pod_spec(o)
        name = o["metadata"]["name"]
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0, name
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
        assert not [v for v in spec["volumes"] if "hostPath" in v], name
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc.get("privileged", False) is False, name
            assert sc["capabilities"] == {"drop": ["ALL"]}, f"{name}: {sc['capabilities']}"
            assert sc.get("runAsUser", psc["runAsUser"]) > 0, name
            tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp, f"{name}: /tmp must be writable under a read-only root"
            vol = next(v for v in spec["volumes"] if v["name"] == tmp[0]["name"])
            assert "emptyDir" in vol, name
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{name} {kind}"


def test_image_user_is_the_uid_the_pods_run_as(objs):
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit() and int(uid) > 0, "a numeric non-root UID (runAsNonRoot checks it)"
    for o in _control_plane(objs):
        assert _pod_spec(o)["securityContext"]["runAsUser"] == int(uid)


def test_only_the_placer_gets_an_api_token(objs):
    for comp in ("pricing", "predictor"):
        assert _pod_spec(workload(objs, comp))["automountServiceAccountToken"] is False
        assert find(objs, "ServiceAccount", f"elastico-{comp}")[
            "automountServiceAccountToken"] is False
    assert _pod_spec(workload(objs, "placer")).get("automountServiceAccountToken", True)


#: The node agent's privileges, named by where they sit in the DaemonSet: each must appear in
#: the manifest with a "why:" comment; anything else privileged fails the test.
_ALLOWED_NODEAGENT_CAPS = {"SYS_ADMIN"}


def _nodeagent_privileges(ds: dict) -> list[tuple[str, str]]:
    """(what, the YAML line that grants it) for every privilege of the node-agent pod; a
    hostPath volume's line is its ``- name:`` under the pod's ``volumes:``."""
    spec = _pod_spec(ds)
    privs: list[tuple[str, str]] = []
    if spec.get("runtimeClassName"):
        privs.append(("runtimeClassName", f"runtimeClassName: {spec['runtimeClassName']}"))
    psc = spec.get("securityContext", {})
    if psc.get("runAsUser") == 0:
        privs.append(("runAsUser 0", "runAsUser: 0"))
    if psc.get("runAsNonRoot") is False:
        privs.append(("runAsNonRoot false", "runAsNonRoot: false"))
    for v in spec["volumes"]:
        if "hostPath" in v:
            privs.append((f"hostPath {v['hostPath']['path']}", f"volumes: - name: {v['name']}"))
    for c in spec["containers"]:
        for cap in c["securityContext"].get("capabilities", {}).get("add", []):
            privs.append((f"capability {cap}", f"- {cap}"))
        for e in c.get("env", []):
            if e["name"] in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES",
                             "NVIDIA_MIG_MONITOR_DEVICES"):
                privs.append((f"env {e['name']}", f"- name: {e['name']}"))
    return privs


def _has_why_comment(lines: list[str], needle: str) -> bool:
    """True when every line holding ``needle`` is directly preceded by a comment block that
    contains ``why:`` (the block may also hold other comment lines), or ends with one.  A
    needle ``"volumes: X"`` looks for X only after the pod's ``volumes:`` line."""
    start = 0
    if needle.startswith("volumes: "):
        start = next(i for i, line in enumerate(lines) if line.strip() == "volumes:")
        needle = needle[len("volumes: "):]
    hits = [i for i, line in enumerate(lines) if i > start and (
        line.strip() == needle.strip() or line.strip().startswith(needle.strip() + " "))]
    assert hits, f"{needle!r} not found in nodeagent.yaml"
    ok = True
    for i in hits:
        j, block = i - 1, []
        while j >= 0 and lines[j].strip().startswith("#"):
            block.append(lines[j])
            j -= 1
        ok &= any("why:" in b for b in block) or "# why:" in lines[i]
    return ok


def test_every_node_agent_privilege_is_justified_in_a_comment(objs):
    ds = workload(objs, "nodeagent")
    lines = (K8S / "nodeagent.yaml").read_text().splitlines()
    privs = _nodeagent_privileges(ds)
    assert len(privs) >= 5, privs  # runtime class, root, 3 hostPaths, SYS_ADMIN, NVIDIA env
    missing = [what for what, needle in privs if not _has_why_comment(lines, needle)]
    assert not missing, f"privileges without a 'why:' comment: {missing}"


def test_the_justification_check_catches_an_unexplained_privilege():
    text = (K8S / "nodeagent.yaml").read_text()
    stripped = re.sub(r"\n *# why: the kubelet device-plugin API[^\n]*(\n *#[^\n]*)*", "", text)
    assert stripped != text
    assert not _has_why_comment(stripped.splitlines(), "volumes: - name: device-plugins")


def test_node_agent_gets_nothing_beyond_its_listed_privileges(objs):
    ds = workload(objs, "nodeagent")
    spec = _pod_spec(ds)
    assert ds["metadata"]["namespace"] == NODE_NS
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        spec["tolerations"]
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc.get("privileged", False) is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert set(sc["capabilities"].get("add", [])) <= _ALLOWED_NODEAGENT_CAPS
        for m in c["volumeMounts"]:
            assert m.get("mountPropagation", "None") == "None", m
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {"/var/lib/kubelet/device-plugins", "/run/nvidia-mps",
                          "/var/log/nvidia-mps"}


# --- wiring ----------------------------------------------------------------------------------

def _container(objs, comp) -> dict:
    return _pod_spec(workload(objs, comp))["containers"][0]


def _port(container: dict, name: str) -> int:
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name)


def _pem_files(tmp_path: Path) -> dict[str, str]:
    """A throwaway CA, and a key and certificate it signed, as PEM files."""
    from datetime import datetime, timedelta, timezone

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + timedelta(days=1)).sign(key, hashes.SHA256()))
    files = {"cert": tmp_path / "tls.crt", "key": tmp_path / "tls.key",
             "client_ca": tmp_path / "ca.crt"}
    files["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["client_ca"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return {k: str(v) for k, v in files.items()}


@pytest.mark.parametrize("comp", METRICS_SERVERS)
def test_config_map_toml_loads_and_matches_the_pod(objs, comp, tmp_path):
    """The generated ConfigMap is read by the real loader (elastico.runtime.serve_config); its listen
    port, metrics port and TLS file paths are the ones the pod exposes and mounts."""
    from elastico.runtime.serve_config import load_serve_config

    ns, port = COMPONENTS[comp]
    toml_text = find(objs, "ConfigMap", "elastico-config", ns)["data"]["elastico.toml"]
    path = tmp_path / "elastico.toml"
    path.write_text(toml_text)
    pem = _pem_files(tmp_path)
    overrides = {f"tls_{k}": v for k, v in pem.items()}
    if comp == "placer":  # its client identity, same files (checked in the test below)
        overrides.update(upstream_ca=pem["client_ca"], upstream_cert=pem["cert"],
                         upstream_key=pem["key"])
    cfg = load_serve_config(comp, config_path=path, env={}, overrides=overrides)
    assert cfg.address == f"0.0.0.0:{port}"
    assert cfg.metrics_port == METRICS_PORT
    c = _container(objs, comp)
    assert _port(c, "grpc") == port and _port(c, "metrics") == METRICS_PORT
    # The TLS paths of the file are where the pod mounts its Secret's keys.
    import tomllib

    tls = tomllib.loads(toml_text)["serve"]["tls"]
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "tls")
    assert tls == {"cert": f"{mount}/tls.crt", "key": f"{mount}/tls.key",
                   "client_ca": f"{mount}/ca.crt"}
    cfg_mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    i = c["args"].index("--config")
    assert c["args"][i + 1] == cfg_mount["mountPath"] and cfg_mount["subPath"] == "elastico.toml"


def test_node_agent_flags_match_its_pod(objs):
    """elastico nodeagent takes flags (no config file): listen port, TLS files and MPS
    directories are the ones the pod exposes and mounts, and the parser accepts them."""
    from elastico.cli import build_parser

    c = _container(objs, "nodeagent")
    args = build_parser().parse_args(c["args"])
    assert args.command == "nodeagent"
    assert args.address == f"0.0.0.0:{COMPONENTS['nodeagent'][1]}" == \
        f"0.0.0.0:{_port(c, 'grpc')}"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert (args.tls_cert, args.tls_key, args.tls_client_ca) == (
        f"{mounts['tls']}/tls.crt", f"{mounts['tls']}/tls.key", f"{mounts['tls']}/ca.crt")
    assert args.mps_pipe_dir == mounts["mps-pipe"] and args.mps_log_dir == mounts["mps-log"]
    assert args.socket_dir == mounts["device-plugins"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == args.mps_pipe_dir


def test_placer_args_parse_and_name_its_lease(objs):
    from elastico.cli import build_parser

    args = build_parser().parse_args(_container(objs, "placer")["args"])
    assert args.command == "schedule" and not args.no_leader_election
    assert (args.lease_namespace, args.lease_name) == (SYSTEM_NS, "elastico-placer")
    role = find(objs, "Role", "elastico-placer-leader-election", SYSTEM_NS)
    assert any(r.get("resourceNames") == [args.lease_name] for r in role["rules"])


def test_placer_dials_pricing_and_predictor_services_over_mutual_tls(objs, tmp_path):
    """The placer's args and the ConfigMap, read by the real parser and config loader
    (elastico.cli.schedule.load_config): it prices and predicts at the pricing and predictor
    Services' DNS names and gRPC ports, presenting its own mounted certificate, and its
    health endpoint is the port its probes check."""
    import tomllib

    from elastico.cli import build_parser
    from elastico.cli.schedule import load_config

    c = _container(objs, "placer")
    args = build_parser().parse_args(c["args"])
    toml_text = find(objs, "ConfigMap", "elastico-config", SYSTEM_NS)["data"]["elastico.toml"]
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "tls")
    placer = tomllib.loads(toml_text)["serve"]["placer"]
    assert (placer["upstream_ca"], placer["upstream_cert"], placer["upstream_key"]) == (
        f"{mount}/ca.crt", f"{mount}/tls.crt", f"{mount}/tls.key")
    # the loader checks that the files exist and hold PEM: point the mount at throwaway ones
    pem = _pem_files(tmp_path)
    path = tmp_path / "elastico.toml"
    path.write_text(toml_text.replace(f"{mount}/tls.crt", pem["cert"])
                    .replace(f"{mount}/tls.key", pem["key"])
                    .replace(f"{mount}/ca.crt", pem["client_ca"]))
    args.config = path
    cfg = load_config(args, env={})
    assert cfg.security == "mtls"
    assert (str(cfg.upstream_ca), str(cfg.upstream_cert), str(cfg.upstream_key)) == (
        pem["client_ca"], pem["cert"], pem["key"])
    for comp, address in (("pricing", cfg.pricing_address),
                          ("predictor", cfg.predictor_address)):
        ns, port = COMPONENTS[comp]
        svc = find(objs, "Service", f"elastico-{comp}", ns)
        host, _, p = address.rpartition(":")
        assert host == f"elastico-{comp}.{ns}.svc" and int(p) == port
        assert port in {x["port"] for x in svc["spec"]["ports"]}
        # the server name the placer checks is on the server's certificate
        certs = load_kustomization(K8S / "cert-manager")
        cert = next(o for o in certs if o["kind"] == "Certificate"
                    and o["metadata"]["name"] == f"elastico-{comp}")
        assert host in cert["spec"]["dnsNames"]
    assert cfg.address == f"0.0.0.0:{_port(c, 'grpc')}"
    mine = next(o for o in load_kustomization(K8S / "cert-manager") if o["kind"] ==
                "Certificate" and o["metadata"]["name"] == "elastico-placer")
    assert "client auth" in mine["spec"]["usages"]


@pytest.mark.parametrize("comp", GRPC_SERVERS)
def test_health_probes_check_the_grpc_port_over_mutual_tls(objs, comp):
    c = _container(objs, comp)
    port = COMPONENTS[comp][1]
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "tls")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        cmd = c[probe]["exec"]["command"]
        assert cmd[0] == "grpc_health_probe"
        assert f"-addr=127.0.0.1:{port}" in cmd and "-tls" in cmd
        assert {f"-tls-ca-cert={mount}/ca.crt", f"-tls-client-cert={mount}/tls.crt",
                f"-tls-client-key={mount}/tls.key"} <= set(cmd)


def test_health_probe_binary_is_in_the_image():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY --from=probe \S+ /usr/local/bin/grpc_health_probe$", text, re.M)


def _matches(selector: dict | None, labels: dict) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions)."""
    if selector is None:
        return False
    for k, v in selector.get("matchLabels", {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions", []):
        k, op, vals = e["key"], e["operator"], e.get("values", [])
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


def test_services_and_pdbs_select_their_pods(objs):
    for comp, (ns, port) in COMPONENTS.items():
        w = workload(objs, comp)
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert _matches(w["spec"]["selector"], labels)
        if comp not in CALLED:
            continue
        svc = find(objs, "Service", f"elastico-{comp}", ns)
        assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
        names = {p["name"] for p in _container(objs, comp)["ports"]}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in names
        assert {p["port"] for p in svc["spec"]["ports"]} == \
            {port} | ({METRICS_PORT} if comp in METRICS_SERVERS else set())
        others = [o for o in objs if _pod_spec(o) and o is not w]
        assert not any(all(_pod_spec(o) and o["spec"]["template"]["metadata"]["labels"].get(k)
                           == v for k, v in svc["spec"]["selector"].items()) for o in others)
    for comp in ("pricing", "predictor", "placer"):
        w = workload(objs, comp)
        labels = w["spec"]["template"]["metadata"]["labels"]
        pdb = find(objs, "PodDisruptionBudget", f"elastico-{comp}", SYSTEM_NS)
        assert _matches(pdb["spec"]["selector"], labels)
        assert 1 <= pdb["spec"]["minAvailable"] < w["spec"]["replicas"]


def test_placer_runs_two_replicas_behind_leader_election(objs):
    placer = workload(objs, "placer")
    assert placer["spec"]["replicas"] == 2
    env = {e["name"]: e.get("valueFrom") for e in _container(objs, "placer")["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


# --- NetworkPolicy ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace and labels) or an address outside the cluster (``ip``)."""

    name: str
    namespace: str | None = None
    labels: tuple = ()
    ip: str | None = None

    @property
    def label_dict(self) -> dict:
        return dict(self.labels)


@dataclass
class Cluster:
    """Namespaces (name -> labels) and the NetworkPolicies in force."""

    namespaces: dict[str, dict]
    policies: list[dict] = field(default_factory=list)

    def _peer_matches(self, peer: dict, policy_ns: str, ep: Endpoint) -> bool:
        if "ipBlock" in peer:
            if ep.ip is None:
                return False  # (pod IPs are not modelled; no policy here uses them)
            net = ipaddress.ip_network(peer["ipBlock"]["cidr"])
            addr = ipaddress.ip_address(ep.ip)
            return addr in net and not any(addr in ipaddress.ip_network(x)
                                           for x in peer["ipBlock"].get("except", []))
        if ep.namespace is None:
            return False  # pod and namespace selectors never match outside addresses
        if "namespaceSelector" in peer:
            ns_ok = _matches(peer["namespaceSelector"], self.namespaces[ep.namespace])
        else:
            ns_ok = ep.namespace == policy_ns
        pod_ok = _matches(peer.get("podSelector", {}), ep.label_dict)
        return ns_ok and pod_ok

    def _rule_admits(self, rule: dict, key: str, policy_ns: str, peer: Endpoint,
                     port: int, proto: str) -> bool:
        peers = rule.get(key)
        if peers is not None and peers != [] and not any(
                self._peer_matches(p, policy_ns, peer) for p in peers):
            return False
        ports = rule.get("ports")
        if not ports:
            return True
        return any(p.get("protocol", "TCP") == proto and
                   (p.get("port") is None or p["port"] == port) for p in ports)

    def _side_allows(self, pod: Endpoint, direction: str, peer: Endpoint, port: int,
                     proto: str) -> bool:
        """Whether ``pod``'s policies of ``direction`` ("Ingress"/"Egress") let ``peer`` in
        (out); a pod no policy of that direction selects is not isolated."""
        if pod.namespace is None:
            return True  # outside the cluster: no NetworkPolicy applies
        selecting = [p for p in self.policies if p["metadata"]["namespace"] == pod.namespace
                     and _matches(p["spec"]["podSelector"], pod.label_dict)
                     and direction in p["spec"].get("policyTypes", ["Ingress"])]
        if not selecting:
            return True
        key, rules = ("from", "ingress") if direction == "Ingress" else ("to", "egress")
        return any(self._rule_admits(r, key, p["metadata"]["namespace"], peer, port, proto)
                   for p in selecting for r in p["spec"].get(rules, []))

    def allows(self, src: Endpoint, dst: Endpoint, port: int, proto: str = "TCP") -> bool:
        return (self._side_allows(src, "Egress", dst, port, proto)
                and self._side_allows(dst, "Ingress", src, port, proto))


def _pod_endpoints(objs) -> dict[str, Endpoint]:
    out = {}
    for comp in COMPONENTS:
        w = workload(objs, comp)
        out[comp] = Endpoint(comp, w["metadata"]["namespace"],
                             tuple(sorted(w["spec"]["template"]["metadata"]["labels"].items())))
    return out


@pytest.fixture(scope="module")
def net(objs):
    namespaces = {o["metadata"]["name"]: {**o["metadata"].get("labels", {}),
                                          "kubernetes.io/metadata.name": o["metadata"]["name"]}
                  for o in objs if o["kind"] == "Namespace"}
    for ns, labels in {"kube-system": {}, "default": {}, "gpu-jobs": {},
                       "monitoring": {"elastico.io/metrics-scraper": "true"},
                       "observability": {"elastico.io/otlp-collector": "true"}}.items():
        namespaces[ns] = {**labels, "kubernetes.io/metadata.name": ns}
    return Cluster(namespaces, [o for o in objs if o["kind"] == "NetworkPolicy"])


ALL_PORTS = sorted({p for _, p in COMPONENTS.values()} | {METRICS_PORT, 53, 443, 4317, 6443})


def test_network_policy_admits_exactly_the_intended_calls_between_components(objs, net):
    pods = _pod_endpoints(objs)
    allowed = {(s, d, port) for s in pods for d in pods for port in ALL_PORTS
               if s != d and net.allows(pods[s], pods[d], port)}
    assert allowed == {("placer", "pricing", 50051), ("placer", "predictor", 50052),
                       ("placer", "nodeagent", 50054), ("nodeagent", "predictor", 50052)}


def test_network_policy_keeps_other_namespaces_out(objs, net):
    pods = _pod_endpoints(objs)
    for ns in ("default", "gpu-jobs", "kube-system", "observability"):
        # Even a pod wearing the placer's labels, outside elastico-system, is refused.
        for labels in ({}, dict(pods["placer"].labels)):
            intruder = Endpoint("x", ns, tuple(sorted(labels.items())))
            assert not [(d, p) for d in pods for p in ALL_PORTS
                        if net.allows(intruder, pods[d], p)], (ns, labels)


def test_metrics_are_scraped_only_from_the_labelled_namespace(objs, net):
    pods = _pod_endpoints(objs)
    scraper = Endpoint("prometheus", "monitoring", (("app", "prometheus"),))
    for comp, (_, grpc_port) in COMPONENTS.items():
        assert net.allows(scraper, pods[comp], METRICS_PORT) == (comp in METRICS_SERVERS), comp
        assert not net.allows(scraper, pods[comp], grpc_port), comp


def test_egress_dns_api_server_and_otlp(objs, net):
    pods = _pod_endpoints(objs)
    dns = Endpoint("coredns", "kube-system", (("k8s-app", "kube-dns"),))
    other_system_pod = Endpoint("other", "kube-system", (("k8s-app", "metrics-server"),))
    collector = Endpoint("otel", "observability", (("app", "otel-collector"),))
    api_server = Endpoint("kube-apiserver", ip="10.0.0.1")
    internet = Endpoint("example", ip="93.184.216.34")
    for comp, ep in pods.items():
        assert net.allows(ep, dns, 53, "UDP") and net.allows(ep, dns, 53, "TCP"), comp
        assert not net.allows(ep, other_system_pod, 53, "UDP"), comp
        assert net.allows(ep, collector, 4317), comp
        assert not net.allows(ep, collector, 4318), comp
        talks_to_api = comp in ("placer", "nodeagent")
        assert net.allows(ep, api_server, 443) == talks_to_api, comp
        assert net.allows(ep, api_server, 6443) == talks_to_api, comp
        assert not net.allows(ep, internet, 80), comp


def test_the_evaluator_is_not_vacuous(objs, net):
    """Without policies every flow is open, and dropping one policy drops its flow: the
    allowed sets above come from the manifests, not from the evaluator."""
    pods = _pod_endpoints(objs)
    open_net = Cluster(net.namespaces, [])
    assert open_net.allows(pods["pricing"], pods["predictor"], 50052)
    assert open_net.allows(Endpoint("x", "default"), pods["nodeagent"], 50054)
    without = Cluster(net.namespaces, [p for p in net.policies
                                       if p["metadata"]["name"] != "pricing"])
    assert not without.allows(pods["placer"], pods["pricing"], 50051)
