"""What the gateway admits from a request before recording it: benchmark sources and webhook targets
pass the shared source policy and outbound guard (regatta_shared.security.source_policy,
regatta_shared.security.outbound)."""
