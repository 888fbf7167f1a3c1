"""The bus: JetStream streams and subjects, the one way a service consumes, the scheduler's and
executors' messages, live output, the relay's nudge, and the AsyncAPI document of it all."""
