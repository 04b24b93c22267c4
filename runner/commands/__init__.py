"""What each CLI subcommand prints; cli.py parses and dispatches."""
