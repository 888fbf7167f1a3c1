"""The secrets vault (encrypted at rest) and the gateway's subkeys of the master key."""
