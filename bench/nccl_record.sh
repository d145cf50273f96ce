#!/bin/sh
# Records the runs behind the NCCL-check cost table (python -m bench --sections nccl) on a GPU machine:
# the full sweep (-b 8 -e 8G -f 2) and the check's default sizes (-b 1G -e 8G -f 2), RUNS times each,
# alternating, with the wall time of every process (start to exit: launch, NCCL set-up, sweep, output).
# Uses nccl-tests' all_reduce_perf when it is on PATH, else the torch fallback `python3 -m checks.allreduce_bench`.
#
#   sh bench/nccl_record.sh OUTDIR      (from the repository root; then copy OUTDIR's files to
#                                        tests/fixtures/nccl/bench/ as the README there says)
#
# NVLink multicast (NVLS) stays off: on shared machines a program using it can take the host's GPUs down.
set -u
out=${1:?usage: nccl_record.sh OUTDIR}
runs=${RUNS:-2}
full_args=${FULL_ARGS:-"-b 8 -e 8G -f 2"}
default_args=${DEFAULT_ARGS:-"-b 1G -e 8G -f 2"}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "all_reduce_perf: $(command -v all_reduce_perf || echo none)"
    echo "/opt: $(ls /opt 2>/dev/null | tr '\n' ' ')"
    nvidia-smi -L 2>&1
    nvidia-smi topo -m 2>&1 | head -20
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1
} > "$out/probe.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || gpus=0
[ "$gpus" -gt 0 ] || gpus=${GPUS:-2}
if command -v all_reduce_perf >/dev/null 2>&1; then
    tool="all_reduce_perf -g $gpus"
else
    tool="python3 -m checks.allreduce_bench ${EXTRA_ARGS:-}"
fi
: > "$out/times.txt"
for i in $(seq 1 "$runs"); do
    if [ $((i % 2)) -eq 1 ]; then order="full default"; else order="default full"; fi
    for sweep in $order; do
        if [ "$sweep" = full ]; then args=$full_args; else args=$default_args; fi
        start=$(date +%s.%N)
        # shellcheck disable=SC2086  # word splitting of the argument strings is wanted
        $tool $args > "$out/${sweep}_$i.txt" 2>> "$out/stderr.txt"
        rc=$?
        end=$(date +%s.%N)
        echo "$sweep $i rc=$rc start=$start end=$end gpus=$gpus cmd=$tool $args" >> "$out/times.txt"
    done
done
cat "$out/times.txt"
