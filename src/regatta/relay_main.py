from regatta.services import run_relay

run_relay()
