"""The `local` environment: every attempt in a bubblewrap sandbox on this host, its image not built; the
host's /usr, /etc and /opt mounted read-only (environment.py describes the whole sandbox)."""
