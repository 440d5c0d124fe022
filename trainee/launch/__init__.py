"""Launching a round: command rendering, per-round config, sandbox, backends."""
