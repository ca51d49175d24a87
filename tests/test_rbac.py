"""RBAC grants exactly what the code calls (issue 7 item 5, issue 9 item 4), with no cluster.

The called set is derived from the source: every ``kubernetes`` client method the scheduler
loop (services/placer/kube/, elastico/cli/schedule.py) or the node agent (services/nodeagent/,
elastico/cli/nodeagent.py) names is mapped by :data:`CLIENT_METHODS` to the (API group,
resource, verb) the API server authorizes.  A ``list_*`` method handed over uncalled (to an
informer) counts as list and, where the code streams watches, watch.  The granted set comes
from every Role/ClusterRole bound to the component's ServiceAccount in k8s/.  The two sets must
be equal: a grant the code never uses, or a call no grant allows, fails and names itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from test_manifests import K8S, NODE_NS, ROOT, SYSTEM_NS, load_kustomization

#: kubernetes client method -> (API group, resource, verb).  Events: CoreV1Api's by default;
#: a module that uses EventsV1Api gets events.k8s.io (see :func:`called_permissions`).
CLIENT_METHODS: dict[str, tuple[str, str, str]] = {
    "list_pod_for_all_namespaces": ("", "pods", "list"),
    "list_namespaced_pod": ("", "pods", "list"),
    "read_namespaced_pod": ("", "pods", "get"),
    "patch_namespaced_pod": ("", "pods", "patch"),
    "replace_namespaced_pod": ("", "pods", "update"),
    "create_namespaced_pod": ("", "pods", "create"),
    "delete_namespaced_pod": ("", "pods", "delete"),
    "patch_namespaced_pod_status": ("", "pods/status", "patch"),
    "create_namespaced_pod_eviction": ("", "pods/eviction", "create"),
    "create_namespaced_binding": ("", "pods/binding", "create"),
    "create_namespaced_pod_binding": ("", "pods/binding", "create"),
    "list_node": ("", "nodes", "list"),
    "read_node": ("", "nodes", "get"),
    "patch_node": ("", "nodes", "patch"),
    "replace_node": ("", "nodes", "update"),
    "patch_node_status": ("", "nodes/status", "patch"),
    "create_namespaced_event": ("", "events", "create"),
    "patch_namespaced_event": ("", "events", "patch"),
    "list_event_for_all_namespaces": ("", "events", "list"),
    "read_namespaced_secret": ("", "secrets", "get"),
    "list_namespaced_secret": ("", "secrets", "list"),
    "list_secret_for_all_namespaces": ("", "secrets", "list"),
    "read_namespaced_config_map": ("", "configmaps", "get"),
    "list_namespace": ("", "namespaces", "list"),
    "read_namespaced_lease": ("coordination.k8s.io", "leases", "get"),
    "create_namespaced_lease": ("coordination.k8s.io", "leases", "create"),
    "replace_namespaced_lease": ("coordination.k8s.io", "leases", "update"),
    "patch_namespaced_lease": ("coordination.k8s.io", "leases", "patch"),
    "delete_namespaced_lease": ("coordination.k8s.io", "leases", "delete"),
}
#: Names shaped like kubernetes client methods: one missing from the table fails the scan.
_CLIENT_SHAPED = re.compile(
    r"^(list|read|create|patch|replace|delete|delete_collection|connect_get|connect_post)_"
    r"(namespaced_\w+|\w+_for_all_namespaces|node(_status|_proxy\w*)?|"
    r"namespace(_status|_finalize)?|persistent_volume\w*|cluster_\w+|component_status)$")

#: component -> (source roots it runs, its ServiceAccount (namespace, name)).
COMPONENTS = {
    "placer": (("services/placer/kube", "elastico/cli/schedule.py"),
               (SYSTEM_NS, "elastico-placer")),
    "nodeagent": (("services/nodeagent", "elastico/cli/nodeagent.py"),
                  (NODE_NS, "elastico-nodeagent")),
}


def _sources(roots) -> list[Path]:
    files = []
    for r in roots:
        path = ROOT / r
        assert path.exists(), (
            f"{r} does not exist: the RBAC test derives the permissions from that module's "
            f"kubernetes client calls; write it (or fix COMPONENTS in tests/test_rbac.py)")
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def called_permissions(sources: dict[str, str]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every kubernetes client method named in ``sources``
    (file name -> Python text).  Raises AssertionError naming a method the table lacks and any
    raw ``call_api``, which the scan cannot map."""
    called: set[tuple[str, str, str]] = set()
    streams = any(".stream(" in text for text in sources.values())
    for name, text in sources.items():
        tree = ast.parse(text, filename=name)
        events_v1 = "EventsV1Api" in text
        called_funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            assert attr != "call_api", f"{name}: raw call_api cannot be mapped to RBAC"
            if attr not in CLIENT_METHODS:
                assert not _CLIENT_SHAPED.match(attr), (
                    f"{name}:{node.lineno}: {attr} looks like a kubernetes client method; "
                    f"add it to CLIENT_METHODS in tests/test_rbac.py")
                continue
            group, resource, verb = CLIENT_METHODS[attr]
            if resource == "events" and events_v1:
                group = "events.k8s.io"
            if id(node) in called_funcs:
                call = next(n for n in ast.walk(tree)
                            if isinstance(n, ast.Call) and n.func is node)
                watch = any(k.arg == "watch" and isinstance(k.value, ast.Constant)
                            and k.value.value is True for k in call.keywords)
                called.add((group, resource, "watch" if watch else verb))
            else:  # handed to an informer: it lists, and watches where the code streams
                called.add((group, resource, verb))
                if verb == "list" and streams:
                    called.add((group, resource, "watch"))
    return called


def component_called(component: str) -> set[tuple[str, str, str]]:
    roots, _ = COMPONENTS[component]
    return called_permissions({str(p.relative_to(ROOT)): p.read_text()
                               for p in _sources(roots)})


@pytest.fixture(scope="module")
def objs() -> list[dict]:
    return load_kustomization(K8S)


def bound_rules(objs: list[dict], sa: tuple[str, str]) -> list[tuple[dict, str | None]]:
    """(rule, namespace or None for cluster-wide) for every rule bound to ServiceAccount
    ``sa`` by any (Cluster)RoleBinding in ``objs``."""
    ns, name = sa
    out = []
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == name
                   and s.get("namespace") == ns for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        role = next(o for o in objs if o["kind"] == ref["kind"]
                    and o["metadata"]["name"] == ref["name"]
                    and (ref["kind"] == "ClusterRole"
                         or o["metadata"].get("namespace") == b["metadata"].get("namespace")))
        scope = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        out += [(r, scope) for r in role["rules"]]
    return out


def granted_permissions(rules) -> set[tuple[str, str, str]]:
    out = set()
    for r, _ in rules:
        assert "nonResourceURLs" not in r
        for g in r["apiGroups"]:
            for res in r["resources"]:
                for v in r["verbs"]:
                    assert "*" not in (g, res, v), f"wildcard in {r}"
                    out.add((g, res, v))
    return out


def can(rules, group: str, resource: str, verb: str, *, namespace: str | None = None,
        name: str | None = None) -> bool:
    """RBAC's answer for one request (wildcards, resourceNames, Role namespaces)."""
    for r, scope in rules:
        if scope is not None and scope != namespace:
            continue
        if not ({group, "*"} & set(r["apiGroups"]) and {resource, "*"} & set(r["resources"])
                and {verb, "*"} & set(r["verbs"])):
            continue
        names = r.get("resourceNames")
        if names and (name is None or name not in names):
            continue
        return True
    return False


@pytest.mark.parametrize("component", list(COMPONENTS))
def test_rbac_grants_exactly_what_the_code_calls(objs, component):
    called = component_called(component)
    granted = granted_permissions(bound_rules(objs, COMPONENTS[component][1]))
    assert called, f"no kubernetes client call found in {component}'s code"
    assert not called - granted, f"{component} calls without a grant: {sorted(called - granted)}"
    assert not granted - called, (f"{component} granted but never called: "
                                  f"{sorted(granted - called)}")


def test_the_placer_code_calls_what_the_scheduler_needs():
    """The scan sees the scheduler's real calls (a scan that found nothing would make the
    exactness test above meaningless)."""
    called = component_called("placer")
    assert {("", "pods", "list"), ("", "pods", "watch"), ("", "pods/binding", "create"),
            ("", "pods", "patch"), ("", "nodes", "watch"),
            ("coordination.k8s.io", "leases", "update")} <= called


def test_placer_cannot_read_secrets_or_write_beyond_its_own_objects(objs):
    rules = bound_rules(objs, COMPONENTS["placer"][1])
    for verb in ("get", "list", "watch"):
        for ns in (None, SYSTEM_NS, "default", "kube-system"):
            assert not can(rules, "", "secrets", verb, namespace=ns), (verb, ns)
            assert not can(rules, "", "configmaps", verb, namespace=ns), (verb, ns)
    # pods/eviction: only to give GPUs back from a pod that opted in with
    # elastico.io/resize-policy: restart (policy/v1 Eviction honours PodDisruptionBudgets)
    # nodes patch: MIG lending's one annotation (elastico.io/mig-lending) on a Node
    writes = {("", "pods", "patch"), ("", "pods/binding", "create"), ("", "pods/eviction", "create"),
              ("", "nodes", "patch"), ("", "events", "create"),
              ("", "events", "patch"), ("coordination.k8s.io", "leases", "create"),
              ("coordination.k8s.io", "leases", "update")}
    granted_writes = {p for p in granted_permissions(rules)
                      if p[2] in ("create", "update", "patch", "delete", "deletecollection")}
    assert granted_writes <= writes, sorted(granted_writes - writes)
    for verb in ("create", "delete", "update"):
        assert not can(rules, "", "pods", verb, namespace="default")
    assert can(rules, "", "nodes", "patch")  # MIG lending's annotation
    for verb in ("create", "delete", "update"):
        assert not can(rules, "", "nodes", verb)
    assert not can(rules, "", "pods/status", "patch", namespace="default")
    assert can(rules, "", "pods/eviction", "create", namespace="default")  # never a delete


def test_placer_touches_only_its_own_lease_in_its_own_namespace(objs):
    rules = bound_rules(objs, COMPONENTS["placer"][1])
    lease = ("coordination.k8s.io", "leases")
    assert can(rules, *lease, "update", namespace=SYSTEM_NS, name="elastico-placer")
    assert can(rules, *lease, "get", namespace=SYSTEM_NS, name="elastico-placer")
    assert not can(rules, *lease, "update", namespace=SYSTEM_NS, name="kube-scheduler")
    assert not can(rules, *lease, "update", namespace="kube-system", name="elastico-placer")
    assert not can(rules, *lease, "create", namespace="kube-system")
    assert can(rules, *lease, "create", namespace=SYSTEM_NS)


def test_node_agent_cannot_bind_read_secrets_or_touch_leases(objs):
    rules = bound_rules(objs, COMPONENTS["nodeagent"][1])
    assert not can(rules, "", "pods/binding", "create", namespace="default")
    assert not can(rules, "", "secrets", "get", namespace=NODE_NS)
    assert not can(rules, "", "pods", "delete", namespace="default")
    assert not can(rules, "coordination.k8s.io", "leases", "update", namespace=SYSTEM_NS,
                   name="elastico-placer")


def test_pricing_and_predictor_hold_no_grants(objs):
    for sa in ("elastico-pricing", "elastico-predictor"):
        assert bound_rules(objs, (SYSTEM_NS, sa)) == []


# --- the scan itself, on hand-written sources ------------------------------------------------

def test_scan_maps_calls_informers_and_watches():
    src = """
from kubernetes import watch
def run(core, coord):
    Informer("pods", core.list_pod_for_all_namespaces)
    watch.Watch().stream(core.list_node)
    core.create_namespaced_pod_binding("p", "ns", {})
    coord.replace_namespaced_lease("l", "ns", {})
"""
    assert called_permissions({"x.py": src}) == {
        ("", "pods", "list"), ("", "pods", "watch"), ("", "nodes", "list"),
        ("", "nodes", "watch"), ("", "pods/binding", "create"),
        ("coordination.k8s.io", "leases", "update")}


def test_scan_without_watch_streams_lists_only_and_sees_watch_kwarg():
    src = "def f(core):\n    core.list_node()\n    core.list_namespaced_pod('ns', watch=True)\n"
    assert called_permissions({"x.py": src}) == {("", "nodes", "list"), ("", "pods", "watch")}


def test_scan_refuses_unknown_client_methods_and_raw_calls():
    with pytest.raises(AssertionError, match="list_namespaced_deployment"):
        called_permissions({"x.py": "def f(a):\n    a.list_namespaced_deployment('ns')\n"})
    with pytest.raises(AssertionError, match="call_api"):
        called_permissions({"x.py": "def f(a):\n    a.call_api('/api/v1/secrets', 'GET')\n"})


def test_scan_maps_events_v1_to_its_api_group():
    src = "from kubernetes.client import EventsV1Api\ndef f(e):\n    e.create_namespaced_event('n', {})\n"
    assert called_permissions({"x.py": src}) == {("events.k8s.io", "events", "create")}
