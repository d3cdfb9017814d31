"""`python -m dsflow.cli`: the dsflow command."""

from dsflow.cli import main

main()
