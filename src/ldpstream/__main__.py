"""`python -m ldpstream ...` is the `ldp` command."""

from ldpstream.cli import main

main()
