"""``python -m jobchain.cli``: the same command line as the ``jobchain`` script."""

from jobchain.cli import main

main()
