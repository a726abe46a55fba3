#!/usr/bin/env bash
# Installs the Debian packages rlpt needs on a fresh machine. Idempotent:
# packages already present are skipped, so it is safe to run on every boot.
#   sudo launch/setup_system.sh
set -euo pipefail

# bubblewrap: the namespace sandbox for model-written code (environments/sandbox).
PACKAGES=(bubblewrap)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup_system: all packages present (${PACKAGES[*]})"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup_system: installed ${missing[*]}"
