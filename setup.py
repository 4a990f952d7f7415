"""pip install . : the parts of sim_real_bridge that need no ROS runtime.

The core library, the MuJoCo simulator and offline replay, with the
``sim-real-bridge`` console script. colcon builds the full ROS 2 package with
CMakeLists.txt instead (package.xml says build_type ament_cmake).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Shipped inside the package so an install without ament finds them
# (sim_real_bridge.resources looks there last).
SHARED_DIRS = ("msg", "config", "launch")


class BuildPyWithShare(build_py):
    """Copies msg/, config/ and launch/ into sim_real_bridge/_share of the build."""

    def run(self) -> None:
        super().run()
        share = Path(self.build_lib) / "sim_real_bridge" / "_share"
        for name in SHARED_DIRS:
            source = HERE / name
            if source.is_dir():
                shutil.copytree(source, share / name, dirs_exist_ok=True)
        shutil.copy2(HERE / "package.xml", share / "package.xml")


def _requirements() -> list[str]:
    lines = (HERE / "requirements" / "base.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


setup(
    name="sim_real_bridge",
    version="0.1.0",
    description="Audit a simulator against its physical twin: aligned residuals and attributed gap events.",
    long_description=(HERE / "README.md").read_text() if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["sim_real_bridge", "sim_real_bridge.*"]),
    package_data={"sim_real_bridge": ["sim/assets/*"]},
    install_requires=_requirements(),
    extras_require={
        "test": ["pytest>=7.4,<8", "pytest-timeout>=2.2", "hypothesis>=6.90", "dask[distributed]>=2024.1"],
        # `sim-real-bridge replay --dask ADDRESS`: the per-bag jobs on a dask.distributed cluster.
        "dask": ["dask[distributed]>=2024.1"],
    },
    cmdclass={"build_py": BuildPyWithShare},
    entry_points={"console_scripts": ["sim-real-bridge = sim_real_bridge.cli:main"]},
)
