#!/bin/bash
# rlpt stand-in's apt-get / apt (/usr/local/bin, before /usr/bin on PATH): see
# environments/containers/bases.py. Only `install` is changed, and only where the
# stand-in's archive cannot do what was asked:
#   pkg=version   a version this archive lacks -> pkg, unpinned
#   old-name      a package this archive no longer has -> its successors (RENAMED),
#                 or old-namet64 where the 64-bit time_t transition renamed it
#                 (Debian 13, Ubuntu 24.04: libglib2.0-0 -> libglib2.0-0t64)
# Each change is one line on stderr and in /opt/rlpt-standin/apt-relaxed.log (the
# build reads it back into the task's marks); then /usr/bin/<apt-get|apt> runs.
real="/usr/bin/${0##*/}"
log=/opt/rlpt-standin/apt-relaxed.log
declare -A RENAMED=(
  [libgl1-mesa-glx]="libgl1 libglx-mesa0"   # gone in Debian 12, Ubuntu 23.10
  [libhdf5-serial-dev]="libhdf5-dev"        # a transitional package, gone
  [netcat]="netcat-openbsd"                 # now virtual with two providers: apt asks which
  [libatlas-base-dev]="libopenblas-dev"     # ATLAS is gone in Debian 13; OpenBLAS gives the same BLAS/LAPACK
)

has_candidate() {  # apt-cache policy prints "Candidate: (none)" or nothing for what it cannot install
  LC_ALL=C apt-cache policy "$1" 2>/dev/null | grep -q '^ *Candidate: [^(]'
}

note() {
  echo "rlpt-standin: $*" >&2
  { mkdir -p "${log%/*}" && echo "$*" >> "$log"; } 2>/dev/null || true
}

args=("$@")
out=()
sub=""
i=0
while ((i < ${#args[@]})); do
  a=${args[i]}
  if [[ -z $sub ]]; then
    out+=("$a")
    case $a in
      -o|-c|-t|-a|--option|--config-file|--target-release|--default-release|--host-architecture)
        ((i + 1 < ${#args[@]})) && out+=("${args[i + 1]}"); ((i += 2)); continue ;;
      -*) ;;
      *) sub=$a ;;
    esac
    ((i += 1)); continue
  fi
  if [[ $sub != install || $a == -* ]]; then
    out+=("$a")
    case $a in -o|-c|-t|-a|--option|--config-file|--target-release|--default-release|--host-architecture)
      ((i + 1 < ${#args[@]})) && out+=("${args[i + 1]}") && ((i += 1)) ;;
    esac
    ((i += 1)); continue
  fi
  name=${a%%=*}
  pin=""
  [[ $a == *=* ]] && pin=${a#*=}
  if [[ -n ${RENAMED[$name]:-} ]] && ! has_candidate "$name"; then
    note "apt-get install: $a is not in this archive: installing its successor(s) ${RENAMED[$name]}"
    read -r -a successors <<< "${RENAMED[$name]}"
    out+=("${successors[@]}")
  elif [[ $name != *t64 && $name != */* ]] && ! has_candidate "$name" && has_candidate "${name}t64"; then
    note "apt-get install: $a is not in this archive: installing ${name}t64 (its 64-bit time_t successor)"
    out+=("${name}t64")
  elif [[ -n $pin ]]; then
    versions=$(LC_ALL=C apt-cache madison "$name" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' | sort -u)
    found=""
    while read -r v; do
      # shellcheck disable=SC2053  # the pin may be a glob (pkg=1.2*)
      [[ -n $v && $v == $pin ]] && found=1
    done <<< "$versions"
    if [[ -n $versions && -z $found ]]; then
      note "apt-get install: $a is not in this archive (it has $(echo $versions | tr ' ' ',')): installing $name unpinned"
      out+=("$name")
    else
      out+=("$a")
    fi
  else
    out+=("$a")
  fi
  ((i += 1))
done
exec "$real" "${out[@]}"
