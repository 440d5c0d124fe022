"""Composition root: process lifecycle, socket server, HTTP app, systemd integration."""
