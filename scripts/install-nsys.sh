#!/usr/bin/env bash
# Install Debian's Nsight Systems 2022.4 (non-free) into a private folder, without touching /etc/apt
# or pulling driver libraries. Prints the nsys path on its last line. Safe to run again.
#
# Why not `apt-get install nsight-systems`: nsight-systems-target depends on libcuda1, which drags in
# driver libraries a CPU machine does not want. `apt-get download` + `dpkg -x` avoids that.
# Why the symlinks: the unpacked nsys looks for its host directory next to its own lib folder, and its
# QdstrmImporter wants an unversioned libssh.so; without either, `nsys profile` leaves only a .qdstrm file.
set -euo pipefail
dest=${1:-${PROBE_NSYS_HOME:-$HOME/.cache/probe/nsys}}
nsys="$dest/usr/bin/nsys"

if [ ! -x "$nsys" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/archives/partial" "$dest"
  echo "deb http://deb.debian.org/debian bookworm main contrib non-free" > "$work/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
            -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" -qq)
  apt-get "${apt_opts[@]}" update >&2
  (cd "$work" && apt-get "${apt_opts[@]}" download nsight-systems nsight-systems-target >&2)
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest"; done
fi

# libssh-4 is a runtime dependency of nsys that a slim image may lack. The linker cache is read whole into a
# variable: a reader that stops at its first match (grep -q, awk's exit) would close the pipe on a long cache,
# and under pipefail ldconfig's SIGPIPE fails the script (exit 141).
libssh_line() { local cache; cache=$(ldconfig -p); awk '/libssh\.so\.4 / && !found {print $NF; found=1}' <<<"$cache"; }
if [ -z "$(libssh_line)" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssh-4 >&2
  else
    echo "install-nsys: libssh-4 is missing; install it (apt-get install libssh-4)" >&2
  fi
fi
ln -sfn ../../nsight-systems/host-linux-x64 "$dest/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"
libssh=$(libssh_line)
[ -n "$libssh" ] && ln -sfn "$libssh" "$dest/usr/lib/nsight-systems/host-linux-x64/libssh.so"
[ -x "$nsys" ] || { echo "install-nsys: $nsys not found after unpacking" >&2; exit 1; }
echo "$nsys"
