"""``elastico nodeagent``: the node-agent DaemonSet's process.

Runs, until SIGTERM/SIGINT: the GPU backend (``--backend`` / ``ELASTICO_GPU_BACKEND``: NVML,
or ``simulated`` with ``ELASTICO_SIMULATED_GPUS``), the MPS control daemon (``--mps``; its
state goes on the Node as ``elastico.io/mps``, ``--no-mps`` publishes "not ready"), the
health watcher, the ``elastico.io/gpu-inventory`` publisher on this Node, the kubelet device
plugin for ``elastico.io/gpu``, and NodeAgentService (``--address``; TLS like
``elastico serve``: plaintext only with ``--plaintext``), and the activity sampler (``--profile-period-s``,
``--profile-window-s``) whose solo profiles go to the predictor (``--predictor-address``,
``ReportProfile``; :mod:`elastico.nodeagent.profiling`).  Without an NVIDIA driver it prints
why and exits with status 2 (the CLI's handling of :class:`~elastico.errors.ElasticoError`).

An adapter (grpc through the servers it starts): registered by :mod:`elastico.cli`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import stat
import sys
from pathlib import Path

from elastico.errors import InvalidArgument
from elastico.cli.serve import stop_on_signals, tls_credentials
from elastico.runtime.serve_config import TlsConfig, check_key_pair

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nodeagent", help="run the node agent (device plugin, MPS, MIG, inventory, NodeAgentService)",
        description="Run the ElastiCo node agent on a GPU node (the DaemonSet's command). "
                    "Exit status: 0 after a clean stop, 2 bad configuration or no NVIDIA driver.")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                   help="this Kubernetes node's name (default: env NODE_NAME, else the host name)")
    p.add_argument("--backend", choices=("nvml", "simulated"), default=None,
                   help="GPU backend (default: env ELASTICO_GPU_BACKEND, else nvml)")
    p.add_argument("--address", default="0.0.0.0:50054", metavar="HOST:PORT",
                   help="NodeAgentService listen address (default 0.0.0.0:50054)")
    p.add_argument("--plaintext", action="store_true", help="serve NodeAgentService without TLS")
    p.add_argument("--tls-cert", default=os.environ.get("ELASTICO_TLS_CERT"), metavar="PEM",
                   help="server certificate chain, PEM (default: env ELASTICO_TLS_CERT); with "
                        "--tls-key, unless --plaintext")
    p.add_argument("--tls-key", default=os.environ.get("ELASTICO_TLS_KEY"), metavar="PEM",
                   help="private key of --tls-cert, PEM (default: env ELASTICO_TLS_KEY)")
    p.add_argument("--tls-client-ca", default=os.environ.get("ELASTICO_TLS_CLIENT_CA"),
                   metavar="PEM", help="CA bundle that client certificates must chain to "
                                       "(mutual TLS; default: env ELASTICO_TLS_CLIENT_CA, else "
                                       "no client certificate asked)")
    p.add_argument("--devices", type=int, default=16,
                   help="elastico.io/gpu handles advertised = most pods co-located on the node (16)")
    p.add_argument("--socket-dir", default="/var/lib/kubelet/device-plugins",
                   help="kubelet's device-plugin directory (default "
                        "/var/lib/kubelet/device-plugins)")
    p.add_argument("--mps", action=argparse.BooleanOptionalAction, default=True,
                   help="start and watch the MPS control daemon (default on)")
    p.add_argument("--mps-pipe-dir", default="/run/nvidia-mps",
                   help="host MPS pipe directory (CUDA_MPS_PIPE_DIRECTORY; default "
                        "/run/nvidia-mps)")
    p.add_argument("--mps-log-dir", default="/var/log/nvidia-mps",
                   help="host MPS log directory (CUDA_MPS_LOG_DIRECTORY; default "
                        "/var/log/nvidia-mps)")
    p.add_argument("--follow-mig-mode", action="store_true",
                   help="switch an idle GPU to the MIG mode a pod's booking needs (normal mode "
                        "for a whole GPU or an MPS share, MIG mode for a MIG instance), as MIG "
                        "lending asks; a busy GPU is never switched; the agent says so on its "
                        "Node (elastico.io/mig-follow) and the placer lends only such nodes "
                        "(default off: such a booking is refused and the operator's MIG mode "
                        "stays; k8s/nodeagent.yaml turns it on; docs/nodeagent.md)")
    p.add_argument("--inventory-refresh-s", type=float, default=60.0,
                   help="seconds between inventory rewrites (also on every health change; "
                        "default 60)")
    p.add_argument("--predictor-address", default=os.environ.get("ELASTICO_PREDICTOR_ADDRESS"),
                   metavar="HOST:PORT",
                   help="send solo activity profiles to the PredictorService there "
                        "(ReportProfile; default: env ELASTICO_PREDICTOR_ADDRESS, else profiles "
                        "are only logged)")
    p.add_argument("--predictor-ca", default=os.environ.get("ELASTICO_UPSTREAM_CA"), metavar="PEM",
                   help="CA of the predictor: call it over TLS (default plaintext; env "
                        "ELASTICO_UPSTREAM_CA)")
    p.add_argument("--predictor-cert", default=os.environ.get("ELASTICO_UPSTREAM_CERT"),
                   metavar="PEM", help="client certificate for mutual TLS to the predictor (env "
                                       "ELASTICO_UPSTREAM_CERT)")
    p.add_argument("--predictor-key", default=os.environ.get("ELASTICO_UPSTREAM_KEY"),
                   metavar="PEM", help="its private key (env ELASTICO_UPSTREAM_KEY)")
    p.add_argument("--profile-period-s", type=float, default=1.0,
                   help="seconds between two activity readings of every GPU (default 1)")
    p.add_argument("--profile-window-s", type=float, default=60.0,
                   help="seconds of solo readings averaged into one solo profile (default 60; "
                        "docs/predictor.md, 'Activity profiles')")
    p.set_defaults(func=run)


def _credentials(args: argparse.Namespace):
    if args.plaintext:
        return None
    missing = [f for f, v in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)) if not v]
    if missing:
        raise InvalidArgument(" and ".join(missing), "missing",
                              "a certificate and key for NodeAgentService (--tls-cert/--tls-key "
                              "or ELASTICO_TLS_CERT/ELASTICO_TLS_KEY), or --plaintext")
    # a key of another certificate: refused here, not by grpc at bind with a C-core log
    check_key_pair("--tls-cert", Path(args.tls_cert), "--tls-key", Path(args.tls_key))
    return tls_credentials(TlsConfig(Path(args.tls_cert), Path(args.tls_key),
                                     Path(args.tls_client_ca) if args.tls_client_ca else None))


def _check_socket_dir(socket_dir: str, kubelet_socket: str) -> None:
    """kubelet's device-plugin folder must exist and hold kubelet's registration socket (the
    plugin registers there at once); checked before anything starts.  Raises
    InvalidArgument naming the path."""
    folder = Path(socket_dir)
    if not folder.is_dir():
        raise InvalidArgument("--socket-dir", socket_dir,
                              "kubelet's device-plugin folder, an existing directory (the "
                              "DaemonSet mounts /var/lib/kubelet/device-plugins)")
    sock = folder / kubelet_socket
    try:
        is_socket = stat.S_ISSOCK(sock.stat().st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        raise InvalidArgument("--socket-dir", socket_dir,
                              f"a folder holding kubelet's registration socket {sock} (is "
                              "kubelet running on this node?)")


def _profile_sink(args: argparse.Namespace):
    """Where solo profiles go: ReportProfile to ``--predictor-address``, else the log."""
    if not args.predictor_address:
        def log(p) -> None:
            print(f"elastico nodeagent: solo profile (no --predictor-address): {p}",
                  file=sys.stderr, flush=True)
        return log
    from elastico.nodeagent.rpc.predictor import ProfileReporter, open_predictor_channel

    def read(flag: str, path: str | None) -> bytes | None:
        if not path:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise InvalidArgument(flag, path, f"a readable PEM file ({e})") from None

    return ProfileReporter(open_predictor_channel(
        args.predictor_address, ca=read("--predictor-ca", args.predictor_ca),
        cert=read("--predictor-cert", args.predictor_cert),
        key=read("--predictor-key", args.predictor_key)))


def run(args: argparse.Namespace) -> int:
    import grpc

    from elastico.nodeagent.backend import SimulatedGpuBackend, backend_from_env
    from elastico.nodeagent.kube.deviceplugin import (
        DevicePlugin, DevicePluginConfig, DevicePluginServicer, check_devices)
    from elastico.nodeagent.inventory import HealthWatcher, InventoryPublisher
    from elastico.nodeagent.kube.client import KubernetesNodeApi
    from elastico.nodeagent.mps import MpsError, MpsManager, MpsStatus, StaticMps
    from elastico.nodeagent.server import build_server

    from elastico.nodeagent.profiling import ActivitySampler, check_sampling, placements_from_pods

    check_devices(args.devices, "--devices")
    try:
        check_sampling(args.profile_period_s, args.profile_window_s)
    except InvalidArgument as e:
        raise InvalidArgument("--" + e.field.replace("_", "-"), e.value, e.allowed) from None
    if not args.inventory_refresh_s > 0:
        raise InvalidArgument("--inventory-refresh-s", args.inventory_refresh_s, "seconds > 0")
    node = args.node_name or socket.gethostname()
    creds = _credentials(args)
    plugin_cfg = DevicePluginConfig(
        node_name=node, socket_dir=args.socket_dir, devices=args.devices,
        mps_pipe_dir=args.mps_pipe_dir, mps_log_dir=args.mps_log_dir,
        follow_mig_mode=args.follow_mig_mode)
    env = dict(os.environ)
    if args.backend:
        env["ELASTICO_GPU_BACKEND"] = args.backend
    # every part started is stopped in reverse order, on a clean stop and on a failed start
    with contextlib.ExitStack() as started:
        backend = backend_from_env(env)  # BackendUnavailable -> "elastico: error: ..." and exit 2
        started.callback(backend.close)
        _check_socket_dir(args.socket_dir, plugin_cfg.kubelet_socket)
        # the MPS status reaches the Node (elastico.io/mps) and gates the device plugin's MPS
        # allocations; a daemon that does not start leaves the agent running (whole-GPU and
        # MIG pods need none) with the status saying why, and the watch retries
        if not args.mps:
            mps = StaticMps(MpsStatus(False, "MPS is disabled on this node (elastico nodeagent "
                                             "--no-mps)"))
        elif isinstance(backend, SimulatedGpuBackend):
            mps = StaticMps(MpsStatus(True, "simulated backend: no MPS control daemon"))
        else:
            mps = MpsManager(args.mps_pipe_dir, args.mps_log_dir)
            try:
                mps.start()
            except MpsError as e:
                print(f"elastico nodeagent: MPS control daemon did not start: {e}; no MPS "
                      "share is offered until it does (retried every 10 s)",
                      file=sys.stderr, flush=True)
            mps.check()
        api = KubernetesNodeApi()
        watcher = HealthWatcher(backend)
        publisher = InventoryPublisher(backend, api, node, args.inventory_refresh_s, mps=mps,
                                       follow_mig_mode=args.follow_mig_mode)
        sampler = ActivitySampler(
            backend, lambda: placements_from_pods(api.list_node_pods(node)),
            period_s=args.profile_period_s, window_s=args.profile_window_s, node=node,
            on_profile=_profile_sink(args), refresh_s=10.0)
        servicer = DevicePluginServicer(backend, api, plugin_cfg, mps=mps,
                                        on_allocate=sampler.invalidate,
                                        on_mode_change=publisher.publish)
        watcher.subscribe(publisher.publish)
        watcher.subscribe(servicer.update)
        mps.subscribe(publisher.publish_mps)
        try:
            server, port = build_server(args.address, backend=backend, node_name=node,
                                        credentials=creds)
        except RuntimeError as e:  # grpc could not bind
            raise InvalidArgument("--address", args.address,
                                  f"a free address of this host ({e})") from None
        server.start()
        started.callback(lambda: server.stop(5).wait())
        watcher.start()
        started.callback(watcher.stop)
        publisher.start()
        started.callback(publisher.stop)
        plugin = DevicePlugin(servicer)
        started.callback(plugin.stop)
        try:
            plugin.start()
        except (grpc.RpcError, RuntimeError) as e:
            # kubelet's socket went away since the check, or kubelet refused the registration
            why = (f"{e.code().name}: {e.details()}" if isinstance(e, grpc.Call) else str(e))
            raise InvalidArgument("--socket-dir", args.socket_dir,
                                  f"kubelet's device-plugin folder, with kubelet accepting the "
                                  f"plugin's registration ({why})") from None
        sampler.start()
        started.callback(sampler.stop)
        print(f"elastico nodeagent: node {node}, {len(backend.list_gpus())} GPUs, "
              f"NodeAgentService on port {port}, device plugin {plugin.socket}",
              file=sys.stderr, flush=True)
        with stop_on_signals() as stop:
            if isinstance(mps, MpsManager):
                mps.watch(stop, 10.0, lambda msg: print(f"elastico nodeagent: {msg}",
                                                        file=sys.stderr, flush=True))
            else:
                while not stop.wait(10.0):
                    pass
    return 0
