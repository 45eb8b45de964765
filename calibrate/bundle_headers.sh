#!/usr/bin/env bash
# Copies the header-only dependencies of trainplan (nlohmann/json, CLI11,
# Eigen 3 and the part of Boost the code includes) from this machine's Debian
# -dev packages into one folder, so that calibrate/run_on_gpu.sh can build on
# a machine without them and without network:
#
#   <out>/include/{nlohmann,CLI,Eigen,boost}/...   one include directory
#   <out>/VERSIONS                                 versions and sources
#
# Usage: calibrate/bundle_headers.sh [out]   (default: third_party_bundle/ at
# the repository root, which is gitignored and carried to the GPU machine).
# Configure with -DTRAINPLAN_BUNDLE_DIR=<out>.
#
# Boost: only the headers some trainplan source reaches, found with `-M`
# (every .cc of simulator/, planner/, calibrate/ and bench/, with g++ and,
# where installed, clang++, so that compiler-specific configuration headers
# of both are in), plus boost/config/ whole, since which of its headers are
# read depends on the compiler and standard library of the GPU machine.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/third_party_bundle}
inc=$out/include

need() { [[ -e $1 ]] || { echo "bundle_headers.sh: $1 not found (install $2)" >&2; exit 1; }; }
need /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need /usr/include/CLI/CLI.hpp libcli11-dev
need /usr/include/eigen3/Eigen/Dense libeigen3-dev
need /usr/include/boost/version.hpp libboost-dev

rm -rf "$out"
mkdir -p "$inc"
cp -RL /usr/include/nlohmann "$inc/"
cp -RL /usr/include/CLI "$inc/"
cp -RL /usr/include/eigen3/Eigen "$inc/"
cp -L /usr/include/eigen3/signature_of_eigen3_matrix_library "$inc/" 2>/dev/null || true
mkdir -p "$inc/boost"
cp -L /usr/include/boost/config.hpp /usr/include/boost/version.hpp "$inc/boost/"

# Every Boost header a trainplan translation unit reads, under each compiler
# installed here and C++17 and C++20 (Boost picks headers by compiler and
# standard).  -MG keeps going past headers missing here (CUDA, MPI).  The
# first pass (g++, C++17) over every source finds the ones that reach Boost.
compilers=(g++)
command -v clang++ >/dev/null 2>&1 && compilers+=(clang++)
list=$(mktemp)
trap 'rm -f "$list"' EXIT
boost_deps() {  # compiler standard source
  (cd "$root" && "$1" -std="$2" -M -MG -I. -I/usr/include/eigen3 -I/usr/local/cuda/include \
     -I/usr/lib/x86_64-linux-gnu/openmpi/include "$3" 2>/dev/null) |
    tr ' \\' '\n\n' | grep '^/usr/include/boost/' || true
}
mapfile -t sources < <(cd "$root" && find simulator planner calibrate bench -name '*.cc' | sort)
boost_sources=()
for src in "${sources[@]}"; do
  deps=$(boost_deps g++ c++17 "$src")
  if [[ -n $deps ]]; then
    boost_sources+=("$src")
    echo "$deps" >>"$list"
  fi
done
for cxx in "${compilers[@]}"; do
  for std in c++17 c++20; do
    for src in "${boost_sources[@]}"; do boost_deps "$cxx" "$std" "$src" >>"$list"; done
  done
done
# Whole libraries whose headers are chosen by compiler and platform macros.
for lib in config preprocessor type_traits predef; do
  if [[ -d /usr/include/boost/$lib ]]; then cp -RL "/usr/include/boost/$lib" "$inc/boost/"; fi
done
count=0
while read -r f; do
  rel=${f#/usr/include/}
  mkdir -p "$inc/$(dirname "$rel")"
  cp -L "/usr/include/$rel" "$inc/$rel"
  count=$((count + 1))
done < <(xargs -r realpath -s -m <"$list" | grep '^/usr/include/boost/' | sort -u)
if ((count == 0)); then
  echo "bundle_headers.sh: found no Boost header in the dependencies of the sources" >&2
  exit 1
fi

ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo unknown; }
boost_ver=$(sed -n 's/^#define BOOST_LIB_VERSION "\(.*\)"/\1/p' /usr/include/boost/version.hpp)
{
  echo "# Header-only dependencies bundled by calibrate/bundle_headers.sh on $(hostname) ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo "nlohmann_json $(ver nlohmann-json3-dev)"
  echo "CLI11 $(ver libcli11-dev)"
  echo "Eigen3 $(ver libeigen3-dev)"
  echo "Boost ${boost_ver//_/.} ($count headers reached by ${boost_sources[*]} under ${compilers[*]}, C++17/20; whole config, preprocessor, type_traits, predef)"
} >"$out/VERSIONS"

size=$(du -sm "$out" | cut -f1)
echo "bundle_headers.sh: wrote $out (${size} MiB, $count Boost headers)"
