"""Errors raised by sim_real_bridge; every public error derives from SimRealBridgeError."""


class SimRealBridgeError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(SimRealBridgeError):
    """A parameter or configuration file is invalid; the message names it."""


class ScenarioError(ConfigError):
    """A scenario file is invalid; the message names the file, entry and field."""


class AlignmentError(SimRealBridgeError):
    """Streams cannot be aligned (bad stamps, shapes or settings)."""


class SimulationError(SimRealBridgeError):
    """The MuJoCo model could not be loaded or stepped."""


class BagError(SimRealBridgeError):
    """A bag is missing, corrupt, truncated or lacks a topic; the message names it."""


class SnapshotError(SimRealBridgeError):
    """A failure snapshot could not be written."""


class TrajectoryError(SimRealBridgeError):
    """A joint trajectory is malformed (joint names, sizes or times); the message says which."""
