"""Errors of the fit package; each message names the file, window or parameter at fault."""

from sim_real_bridge.errors import SimRealBridgeError


class FitError(SimRealBridgeError):
    """A fit cannot run: bad recording, model, window or parameter name."""


class ModelMismatchError(FitError):
    """The model's joints do not match the recording's (after the topic mapping)."""


class NoMotionError(FitError):
    """A fit window holds no motion: nothing in it can pin a parameter down."""


class UnknownParameterError(FitError):
    """A parameter name the fit does not know, or one the model cannot carry."""
