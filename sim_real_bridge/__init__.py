"""sim_real_bridge: audit a simulator against its physical twin, live or from bags.

The generated message module ``sim_real_bridge.msg`` is installed by the CMake build
into the ROS prefix; extending ``__path__`` lets a source checkout find it there.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
