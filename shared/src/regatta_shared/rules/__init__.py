"""The platform's rules, each once: execution defaults, scoring conditions and rules, outcomes,
participants and harnesses, hosted models, ceilings, task defects and statuses."""
