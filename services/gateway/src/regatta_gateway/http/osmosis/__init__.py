"""The Osmosis CLI's REST contract (`/api/cli`, docs: osmosis-cli-contract.md): its routes, scope headers,
null-safe shapes and signed downloads, over the same commands and queries as `/api/v1`."""
