"""Process plumbing of the services (layer 1): the gRPC server and its error mapping, the
OpenTelemetry adapter, Prometheus metrics, a service's configuration and the process
lifeline.  Only adapters (services' ``server.py``, ``rpc/``, ``kube/``) and the command line
import the gRPC parts of it."""
