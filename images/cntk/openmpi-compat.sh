#!/usr/bin/env bash
# CNTK 2.7's libraries load OpenMPI 1.10 by name (libmpi.so.12, libmpi_cxx.so.1), even in a single
# process. Link the host's OpenMPI runtime (Debian / Ubuntu: libopenmpi3, which has libmpi.so.40 and
# libmpi_cxx.so.40) under those names in FOLDER, then put FOLDER on LD_LIBRARY_PATH for the local
# backend's CNTK cells (the local backend passes LD_LIBRARY_PATH on). The CNTK images do the same.
#
#   images/cntk/openmpi-compat.sh FOLDER && export LD_LIBRARY_PATH=FOLDER${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
set -euo pipefail
folder="${1:?usage: openmpi-compat.sh FOLDER}"
find_library() {
  ldconfig -p | awk -v name="$1" '$1 ~ "^"name"\\.so\\.[0-9]+$" {print $NF}' | sort -V | tail -n 1
}
mpi=$(find_library libmpi)
mpi_cxx=$(find_library libmpi_cxx)
if [ -z "$mpi" ] || [ -z "$mpi_cxx" ]; then
  echo "error: no OpenMPI runtime with C++ bindings found (apt-get install libopenmpi3)" >&2
  exit 2
fi
mkdir -p "$folder"
ln -sfn "$mpi" "$folder/libmpi.so.12"
ln -sfn "$mpi_cxx" "$folder/libmpi_cxx.so.1"
echo "linked $mpi and $mpi_cxx under OpenMPI 1.10's names in $folder"
