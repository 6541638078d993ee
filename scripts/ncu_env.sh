# ncu_env.sh -- sourced by the Nsight Compute scripts (profile.sh, pipe_profile.sh, dram_traffic.sh):
# the repository root as working folder, the build and output folders (BUILD, default build-gpu;
# OUT, default /tmp/out, created) and the ncu binary (NCU).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
