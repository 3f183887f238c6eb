"""The `tt` command line."""
