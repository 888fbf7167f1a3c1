"""`python -m regatta_gateway.rebuild` (what `regatta projections rebuild` runs): drop the gateway's read
models and replay the whole event log into them. The read models are the gateway's, so their rebuild is
an entry of the gateway's that the CLI launches, as it launches the services, rather than imports."""

from __future__ import annotations

from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.settings import load_settings
from regatta_shared.system.service import make_store

from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels.operations import OpsReadModels


def main() -> None:
    store = make_store(load_settings())
    for projection in (ReadModels(), OpsReadModels()):
        count = ProjectionRunner(store, projection).rebuild()
        print(f"Rebuilt read models {projection.name!r} from {count} events", flush=True)


if __name__ == "__main__":
    main()
