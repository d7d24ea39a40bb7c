#!/bin/sh
# The Quabla CUDA device check. Run on the GPU machine from the unpacked bundle:
#
#   ./run.sh            # conformance and benchmarks, about five minutes on an H100
#   ./run.sh --quick    # smaller sizes
#
# Writes report.md beside this script. The CUDA libraries are found as docs/cuda.md says
# (QUABLA_CUDA_LIB_PATH, the pip wheels of the Python environments in sight, $CUDA_PATH,
# /usr/local/cuda, the loader's path); QUABLA_PYTHON names the Python with JAX (python3).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# NCCL, for the data-parallel checks: the nvidia-nccl wheel of the Python with JAX, when no
# folder is named already.
if [ -z "${QUABLA_CUDA_LIB_PATH:-}" ]; then
  nccl=$("${QUABLA_PYTHON:-python3}" -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
  if [ -n "$nccl" ] && [ -d "$nccl" ]; then
    QUABLA_CUDA_LIB_PATH=$nccl
    export QUABLA_CUDA_LIB_PATH
  fi
fi
status=0
"$here/quabla-cuda-check" --report "$here/report.md" --jax-script "$here/jax_pinn.py" "$@" || status=$?
echo "report: $here/report.md (exit status $status)"
exit $status
