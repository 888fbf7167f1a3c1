"""Evidence of the verifier's integrity: the verifier's tool chain against the image's files, and the
verifier's own files."""
