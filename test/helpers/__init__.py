"""Helpers shared by tests (processes started by tests, message factories)."""
