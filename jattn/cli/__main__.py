"""``python -m jattn.cli``: the same as the ``jattn`` command."""

from jattn.cli import main

main()
