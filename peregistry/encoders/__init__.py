"""The built-in encoder families. Each module is a plugin registered through an entry point."""
