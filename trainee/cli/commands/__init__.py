"""CLI commands, one module per group, imported lazily."""
