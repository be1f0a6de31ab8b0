"""ldp: epsilon-LDP mechanisms, pure numpy (no I/O)."""
