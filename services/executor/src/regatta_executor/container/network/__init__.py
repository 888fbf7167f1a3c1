"""The sandbox's network: the bridge and its firewall rules, the DNS forwarder, allow-listed hosts."""
