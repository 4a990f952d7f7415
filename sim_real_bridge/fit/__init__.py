"""From divergence to a corrected simulator: fit MuJoCo model parameters to recorded real runs.

``sim-real-bridge fit`` drives a model with the real robot's recorded commands, fits the
chosen parameters with ``mujoco.sysid`` to what the real robot did, and writes fit.json,
fit.html and the corrected model. See docs/FIT.md.
"""
