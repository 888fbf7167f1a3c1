"""HTTP: Regatta's own `/api/v1`, one module per resource (routes only: decode, call one function, return),
the edge guards and authentication every request passes, and `osmosis/`, the Osmosis CLI's REST contract."""
