"""Scoring events against the stand-in's truth, sim-to-real predictivity, and summary.json."""
