#!/usr/bin/env bash
# Installs the Debian packages rlpt needs on a fresh machine and configures the
# container engine. Idempotent: packages already present are skipped and the
# engine's configuration is rewritten only when it differs, so it is safe to run
# on every boot.
#   sudo launch/setup_system.sh
set -euo pipefail

# bubblewrap: the namespace sandbox for model-written code (environments/sandbox).
# podman, buildah, runc, catatonit: terminal tasks' containers, built from their
#   own Dockerfiles (environments/containers); mmdebstrap: their local base
#   images from the Debian archive (no registry needed).
PACKAGES=(bubblewrap podman buildah runc catatonit mmdebstrap)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "setup_system: all packages present (${PACKAGES[*]})"
else
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup_system: installed ${missing[*]}"
fi

# ubuntu-keyring: the Ubuntu archive's keys, for `ubuntu:*` stand-ins built from
# Ubuntu's archive (environments/containers/bases.py). Debian ships it from Debian
# 13 on; on Debian 12 its .deb comes from Debian 13's archive, through apt with a
# private source list signed by the Debian archive key (the same trust as every
# other package here). It has no dependencies.
if ! dpkg-query -W -f='${Status}' ubuntu-keyring 2>/dev/null | grep -q "install ok installed"; then
  if LC_ALL=C apt-cache policy ubuntu-keyring 2>/dev/null | grep -q '^ *Candidate: [^(]'; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends ubuntu-keyring >/dev/null
  else
    tmp=$(mktemp -d)
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" > "$tmp/sources.list"
    apt_opts=(-o "Dir::Etc::sourcelist=$tmp/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$tmp/lists"
              -o "Dir::Cache=$tmp/cache" -o "APT::Sandbox::User=root")
    if apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1 \
        && (cd "$tmp" && apt-get "${apt_opts[@]}" download ubuntu-keyring >/dev/null 2>&1); then
      $SUDO dpkg -i "$tmp"/ubuntu-keyring_*_all.deb >/dev/null
    fi
    rm -rf "$tmp"
  fi
  if dpkg-query -W -f='${Status}' ubuntu-keyring 2>/dev/null | grep -q "install ok installed"; then
    echo "setup_system: installed ubuntu-keyring"
  else
    echo "setup_system: WARNING: no ubuntu-keyring: ubuntu:* stand-ins will be Debian 13" >&2
  fi
fi

# The engine: runc (this kind of VM has a hybrid cgroup layout), cgroupfs, file
# events, and default ulimits no higher than this host grants (a container asking
# for more than the host's hard limit fails to start without CAP_SYS_RESOURCE).
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[[ $nofile == unlimited || $nofile -gt 1048576 ]] && nofile=1048576
[[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
conf="[containers]
default_ulimits = [\"nofile=${nofile}:${nofile}\", \"nproc=${nproc}:${nproc}\"]
[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\""
if [[ "$(cat /etc/containers/containers.conf 2>/dev/null)" != "$conf" ]]; then
  $SUDO mkdir -p /etc/containers
  printf '%s\n' "$conf" | $SUDO tee /etc/containers/containers.conf >/dev/null
  echo "setup_system: wrote /etc/containers/containers.conf (runc, nofile ${nofile}, nproc ${nproc})"
fi
# The engine must answer here; say so now rather than in a task's first episode.
if ! $SUDO podman info >/dev/null 2>/tmp/rlpt-podman-check.log; then
  echo "setup_system: WARNING: podman does not work here: $(tail -1 /tmp/rlpt-podman-check.log)" >&2
fi
