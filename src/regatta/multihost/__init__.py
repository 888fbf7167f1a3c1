"""Several executor hosts on one machine, each with its own network namespace, PID namespace, Docker
engine and state folder, sharing only a 3-server NATS cluster and the event store (docs/deployment.md,
"Multi-host"). `python -m regatta.multihost` starts one for an operator to try; the tests and the
benchmark start it through `Cluster`."""
