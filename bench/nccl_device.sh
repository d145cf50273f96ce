#!/bin/sh
# Runs on a GPU machine (the device machine: no Slurm, no network): builds nccl-tests 2.19.6 with
# ../shared/tools/build-nccl-tests.sh (Hopper code only, to build fast), writes probe.txt naming the machine,
# then runs the driver that `python -m bench.nccl_device plan PLANDIR` wrote: the NCCL check's own local
# launcher scripts, each setting RUNS times. Bring OUTDIR back and `python -m bench.nccl_device import` it.
#
#   sh bench/nccl_device.sh PLANDIR BUILD_SCRIPT OUTDIR
#
# NVLink multicast (NVLS) stays off: on shared machines a program using it can take the host's GPUs down.
set -u
plan=${1:?usage: nccl_device.sh PLANDIR BUILD_SCRIPT OUTDIR}
build=${2:?usage: nccl_device.sh PLANDIR BUILD_SCRIPT OUTDIR}
out=${3:?usage: nccl_device.sh PLANDIR BUILD_SCRIPT OUTDIR}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}"
mkdir -p "$out"
cp "$plan/plan.json" "$out/"
start=$(date +%s)
if ! bash "$build" /tmp/nccl-tests > "$out/build.txt" 2>&1; then
    tail -40 /tmp/nccl-tests/build.log >> "$out/build.txt" 2>/dev/null
    cat "$out/build.txt"
    exit 1
fi
echo "build seconds: $(( $(date +%s) - start )) (NVCC_GENCODE=$NVCC_GENCODE, $(nproc) cores)" >> "$out/build.txt"
lib=$(sed -n 's/^run: LD_LIBRARY_PATH=\([^ ]*\) .*/\1/p' "$out/build.txt")
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "kernel: $(uname -r)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
    echo "LD_LIBRARY_PATH: $LD_LIBRARY_PATH"
    echo "nccl library: $(ldd /tmp/nccl-tests/build/all_reduce_perf | grep -i nccl)"
    nvcc --version | tail -2
    echo "## nvidia-smi"; nvidia-smi
    echo "## nvidia-smi -L"; nvidia-smi -L
    echo "## nvidia-smi topo -m"; nvidia-smi topo -m
    echo "## nvidia-smi -q (selected)"
    nvidia-smi -q | grep -E 'Product Name|Product Architecture|Persistence Mode|VBIOS Version|Bus Id|Link Width|Max Link Gen|Driver Version|CUDA Version' | sort | uniq -c
    echo "## nvidia-smi nvlink -s"; nvidia-smi nvlink -s 2>&1 | head -40
} > "$out/probe.txt" 2>&1
# DEADLINE (epoch seconds): stop the runs then, keeping what was recorded (the device's command limit).
if [ -n "${DEADLINE:-}" ]; then
    timeout $(( DEADLINE - $(date +%s) )) sh "$plan/record.sh" "$out"
else
    sh "$plan/record.sh" "$out"
fi
cat "$out/order.txt"
