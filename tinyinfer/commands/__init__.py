"""One module per CLI subcommand: each has add_arguments(parser) and run(args)."""
