"""One module per ``tokchat`` subcommand, each with ``add_arguments(parser)`` and ``run(args) -> int``."""
