"""Conversions between ROS messages and numpy arrays, in one place (duck-typed on field names)."""
