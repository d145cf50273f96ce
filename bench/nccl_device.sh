#!/bin/sh
# Runs on a GPU machine (the device machine: no Slurm, no network). Builds nothing: it uses an all_reduce_perf
# (nccl-tests) already installed there, taken from NCCL_TESTS_BIN (the binary, or a directory holding it), else
# `all_reduce_perf` on PATH, else /usr/local/bin, /opt/nccl-tests/build or /usr/bin. With none of those, it runs
# the NCCL check's PyTorch fallback (python3 -m reconciler.checks.allreduce_bench, on the GPUs) in its place when
# python3 can import torch, and says so on stdout and in probe.txt; otherwise it exits 2 saying what to set.
# It writes probe.txt naming the machine and the binary, then runs the driver that
# `python -m bench.nccl_device plan PLANDIR --binary all_reduce_perf` wrote: the NCCL check's own local launcher
# scripts, each setting RUNS times, with the chosen program first on PATH as `all_reduce_perf`.
# Bring OUTDIR back and `python -m bench.nccl_device import` it.
#
#   [NCCL_TESTS_BIN=/opt/nccl-tests/build] [DEADLINE=EPOCH] sh bench/nccl_device.sh PLANDIR OUTDIR
#
# NVLink multicast (NVLS) stays off: on shared machines a program using it can take the host's GPUs down.
set -u
die() { echo "nccl_device.sh: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: [NCCL_TESTS_BIN=PATH] sh bench/nccl_device.sh PLANDIR OUTDIR (it builds nothing and" \
    "takes no build script: set NCCL_TESTS_BIN to an installed all_reduce_perf or its directory)"
plan=$1
out=$2
{ [ -f "$plan/plan.json" ] && [ -f "$plan/record.sh" ]; } ||
    die "$plan has no plan.json and record.sh: write them with python -m bench.nccl_device plan $plan --binary all_reduce_perf"
for script in "$plan"/batch/*.sh; do
    # The launcher's line ends in `... exec "$@"' sh BINARY ARGS`: BINARY must be found on PATH, not a fixed path.
    grep -q "' sh all_reduce_perf " "$script" 2>/dev/null ||
        die "$script does not run all_reduce_perf from PATH: write the plan again with --binary all_reduce_perf"
done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
repo=$(cd "$(dirname "$0")/.." && pwd)

# The all_reduce_perf to run: NCCL_TESTS_BIN, PATH, then the usual install places; none: the PyTorch fallback.
bin=
from=
if [ -n "${NCCL_TESTS_BIN:-}" ]; then
    for candidate in "$NCCL_TESTS_BIN" "$NCCL_TESTS_BIN/all_reduce_perf" "$NCCL_TESTS_BIN/build/all_reduce_perf"; do
        if [ -f "$candidate" ] && [ -x "$candidate" ]; then bin=$candidate; break; fi
    done
    [ -n "$bin" ] || die "NCCL_TESTS_BIN=$NCCL_TESTS_BIN is neither an executable all_reduce_perf nor a directory" \
        "holding one: set it to an installed nccl-tests all_reduce_perf (or unset it)"
    from=NCCL_TESTS_BIN
else
    bin=$(command -v all_reduce_perf 2>/dev/null) && from=PATH || bin=
    if [ -z "$bin" ]; then
        for candidate in /usr/local/bin/all_reduce_perf /opt/nccl-tests/build/all_reduce_perf /usr/bin/all_reduce_perf; do
            if [ -f "$candidate" ] && [ -x "$candidate" ]; then bin=$candidate; from="install place"; break; fi
        done
    fi
fi
if [ -n "$bin" ]; then
    bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
elif command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then
    from=fallback
else
    die "no all_reduce_perf installed (NCCL_TESTS_BIN unset, none on PATH, in /usr/local/bin, /opt/nccl-tests/build" \
        "or /usr/bin) and python3 cannot import torch for the PyTorch fallback: set NCCL_TESTS_BIN to an installed" \
        "all_reduce_perf or the directory holding it"
fi

# The launcher's scripts run `all_reduce_perf` from PATH: put the chosen program first there under that name.
shim=$(mktemp -d "${TMPDIR:-/tmp}/nccl-device.XXXXXX") || exit 1
trap 'rm -rf "$shim"' EXIT
if [ "$from" = fallback ]; then
    cat > "$shim/all_reduce_perf" <<EOF
#!/bin/sh
# nccl_device.sh: no all_reduce_perf installed, the NCCL check's PyTorch fallback instead (-g N starts N processes).
export PYTHONPATH="$repo\${PYTHONPATH:+:\$PYTHONPATH}"
exec python3 -m reconciler.checks.allreduce_bench --device cuda "\$@"
EOF
    chmod +x "$shim/all_reduce_perf"
    echo "nccl_device.sh: no all_reduce_perf installed: every run uses the PyTorch fallback" \
        "(python3 -m reconciler.checks.allreduce_bench --device cuda), not nccl-tests"
else
    ln -s "$bin" "$shim/all_reduce_perf"
    echo "nccl_device.sh: all_reduce_perf = $bin (from $from)"
fi
export PATH="$shim:$PATH"

mkdir -p "$out"
cp "$plan/plan.json" "$out/"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "kernel: $(uname -r)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
    echo "LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-}"
    if [ "$from" = fallback ]; then
        echo "all_reduce_perf: none installed; runs use the PyTorch fallback:" \
            "python3 -m reconciler.checks.allreduce_bench --device cuda (-g N: N processes)"
        echo "python3: $(command -v python3), $(python3 --version 2>&1)"
        python3 -c 'import torch; print("torch:", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))'
    else
        echo "all_reduce_perf: $bin (from $from)"
        echo "nccl library: $(ldd "$bin" | grep -i nccl)"
    fi
    if command -v nvcc >/dev/null 2>&1; then nvcc --version | tail -2; fi
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
