#!/usr/bin/env bash
# Installs what `make` needs from the system that a bare Debian/Ubuntu may lack:
# venv support, a C/C++ compiler, CMake, OSMesa for offscreen MuJoCo rendering, and
# Chromium for the test that opens report.html in a real browser.
# Runs apt-get only when something is missing, and only as root or with sudo.
set -euo pipefail
python=${1:-python3}
missing=()
"$python" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v cc >/dev/null || missing+=(gcc)
command -v c++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
[ -e /usr/lib/x86_64-linux-gnu/libOSMesa.so.8 ] || [ -e /usr/lib/aarch64-linux-gnu/libOSMesa.so.8 ] \
  || ldconfig -p 2>/dev/null | grep -q libOSMesa || missing+=(libosmesa6)
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "make: installing system packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
