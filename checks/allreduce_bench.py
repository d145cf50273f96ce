"""Fallback all-reduce benchmark for clusters without nccl-tests, printing nccl-tests' table.

It uses torch.distributed (NCCL on GPUs, gloo on CPUs) and prints the same lines as nccl-tests'
``all_reduce_perf``, so ``checks.nccl.parser`` reads its output like any nccl-tests run.

Launch it with one process per GPU, either through torchrun (or srun with RANK/WORLD_SIZE/LOCAL_RANK,
MASTER_ADDR and MASTER_PORT exported)::

    torchrun --nproc-per-node 8 -m reconciler.checks.allreduce_bench -b 8 -e 8G -f 2

or let it start one process per visible GPU itself (two gloo processes when there is no GPU)::

    python -m reconciler.checks.allreduce_bench -b 8 -e 8G -f 2 [-g NPROCS] [--device cpu]

Bandwidths follow nccl-tests: algbw = bytes / time (GB/s, 1e9 bytes), busbw = algbw * 2 (n - 1) / n,
and the average bus bandwidth is the mean of every row's out-of-place and in-place busbw.
torch.distributed has no out-of-place all-reduce: the out-of-place column times
``recv.copy_(send)`` followed by ``all_reduce(recv)``, the copy included, so it reads lower than
nccl-tests' out-of-place figure; the in-place column is a plain ``all_reduce(buf)``.
Each size is checked after timing: every rank fills its input with (i % 7 + 1) * (rank + 1) and
the result is compared element-wise with the closed-form sum (or max/min); #wrong counts the
mismatches summed over ranks, as nccl-tests does (16-bit floats within world * eps, relative).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TOOL = "checks.allreduce_bench"
DESCRIPTION = "All-reduce benchmark through torch.distributed, printing nccl-tests' all_reduce_perf table."
PROGRAM = "all_reduce_perf"
DTYPES = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int64": "int64",
}
TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16"}
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Placement:
    """One measured half of a row: out-of-place or in-place."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None


@dataclass(frozen=True)
class Launch:
    """Rank, world size and local rank of this process."""

    rank: int
    world: int
    local_rank: int


def parse_size(text: str) -> int:
    """A size like nccl-tests takes it: 8, 64K, 1M, 8G (powers of 1024)."""
    text = text.strip()
    unit = UNITS.get(text[-1:].upper(), 1)
    number = text[:-1] if unit != 1 else text
    return int(float(number) * unit)


def sizes(min_bytes: int, max_bytes: int, step_factor: float, step_bytes: int) -> list[int]:
    """The sweep of message sizes, as nccl-tests builds it (-b, -e, -f or -i)."""
    found: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        found.append(size)
        nxt = int(size * step_factor) if step_factor > 1 else size + step_bytes
        if nxt <= size:
            break
        size = nxt
    return found


def bus_factor(world: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2 (n - 1) / n."""
    return 2.0 * (world - 1) / world if world > 0 else 0.0


def bandwidths(size: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one all-reduce of size bytes taking seconds."""
    algbw = size / 1.0e9 / seconds if seconds > 0 else 0.0
    return algbw, algbw * bus_factor(world)


def fmt_float(value: float, width: int) -> str:
    """Format like nccl-tests' getFloatStr: 2, 1 or 0 decimals to fit the width, else exponent."""
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def fmt_half(half: Placement) -> str:
    """The time/algbw/busbw/#wrong columns of one placement."""
    wrong = "   N/A" if half.wrong is None else f"{float(half.wrong):6g}"
    return f"  {fmt_float(half.time_us, 7)}  {fmt_float(half.algbw, 6)}  {fmt_float(half.busbw, 6)}  {wrong}"


def fmt_row(size: int, count: int, type_name: str, op: str, oop: Placement, ip: Placement) -> str:
    """One results row in nccl-tests' layout (root is -1 for all-reduce)."""
    return f"{size:12d}  {count:12d}  {type_name:>8s}  {op:>6s}  {-1:6d}" + fmt_half(oop) + fmt_half(ip)


def header_lines(args: argparse.Namespace, world: int, versions: str) -> list[str]:
    """The lines nccl-tests prints before the device list."""
    step = f"{args.stepfactor:g}(factor)" if args.stepfactor > 1 else f"{args.stepbytes}(bytes)"
    return [
        f"# {TOOL} (torch.distributed fallback for nccl-tests): {versions}, {world} ranks",
        f"# Collective test starting: {PROGRAM}",
        f"# nThread 1 nGpus 1 minBytes {args.minbytes} maxBytes {args.maxbytes} step: {step} "
        f"warmup iters: {args.warmup_iters} iters: {args.iters} agg iters: 1 "
        f"validation: {int(args.check > 0)} graph: 0",
        "# Out-of-place: recv.copy_(send) then all_reduce(recv), the copy timed too "
        "(torch.distributed has no out-of-place all_reduce)",
        "#",
        "# Using devices",
    ]


def table_header() -> list[str]:
    """The three header lines of the results table."""
    groups = f"{'':>10}out-of-place{'':>23}in-place{'':>10}"
    return [
        "#",
        f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6} {groups}",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
        f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6} ",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
        f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6} ",
    ]


def footer_lines(out_of_bounds: int, avg_busbw: float) -> list[str]:
    """The summary lines nccl-tests prints after the table."""
    return [
        f"# {'Out of bounds values':<20} : {out_of_bounds} {'FAILED' if out_of_bounds else 'OK'}",
        f"# {'Avg bus bandwidth':<20} : {avg_busbw:g} ",
        "#",
        f"# Collective test concluded: {PROGRAM}",
        "#",
    ]


def device_line(rank: int, info: dict[str, Any]) -> str:
    """One '#  Rank ...' line."""
    return (
        f"#  Rank {rank:2d} Group  0 Pid {info['pid']:6d} on {info['host']:>10s} device {info['device']:>2s} "
        f"[{info['bus']}] {info['name']}"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options, named like nccl-tests' where they mean the same."""
    p = argparse.ArgumentParser(prog=f"python -m {TOOL}", description=DESCRIPTION)
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("32M"))
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("32M"))
    p.add_argument("-f", "--stepfactor", type=float, default=1.0)
    p.add_argument("-i", "--stepbytes", type=parse_size, default=parse_size("1M"))
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1, help="check results (1) or not (0)")
    p.add_argument("-d", "--datatype", choices=sorted(DTYPES), default="float")
    p.add_argument("-o", "--op", choices=["sum", "max", "min"], default="sum")
    p.add_argument("-g", "--ngpus", type=int, default=0, help="processes to start when not under a launcher")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--timeout", type=int, default=600, help="seconds for process-group operations")
    args = p.parse_args(argv)
    if args.minbytes > args.maxbytes or args.iters < 1 or args.warmup_iters < 0:
        p.error("need minbytes <= maxbytes, iters >= 1 and warmup_iters >= 0")
    return args


# -- torch side -----------------------------------------------------------------------------------


def _torch() -> Any:
    """Import torch lazily so that --help works without it."""
    import torch

    return torch


def use_cuda(args: argparse.Namespace) -> bool:
    """True when the run uses GPUs (and NCCL)."""
    torch = _torch()
    if args.device == "cuda":
        return True
    return args.device == "auto" and bool(torch.cuda.is_available())


def versions_text(cuda: bool) -> str:
    """torch, backend and NCCL versions for the first line."""
    torch = _torch()
    text = f"torch {torch.__version__}, backend {'nccl' if cuda else 'gloo'}"
    if cuda:
        text += f", NCCL {'.'.join(str(v) for v in torch.cuda.nccl.version())}"
    return text


def local_info(cuda: bool, device: Any) -> dict[str, Any]:
    """This rank's pid, host and device description."""
    info: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname().split(".")[0]}
    if not cuda:
        return {**info, "device": "cpu", "bus": "cpu", "name": f"{platform.machine()} CPU (gloo)"}
    props = _torch().cuda.get_device_properties(device)
    domain, bus_id, dev_id = (getattr(props, k, 0) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    bus = f"{domain:04x}:{bus_id:02x}:{dev_id:02x}"
    return {**info, "device": str(device.index), "bus": bus, "name": props.name}


def _tile(count: int, factor: int, dtype: Any, device: Any) -> Any:
    """(i % 7 + 1) * factor for i < count, built from a 7-element tile to keep memory at count elements."""
    torch = _torch()
    tile = torch.arange(1, 8, device=device, dtype=torch.int64) * factor
    reps = -(-count // 7)
    return tile.to(dtype).repeat(reps)[:count]


def pattern(count: int, rank: int, dtype: Any, device: Any) -> Any:
    """Rank's input: (i % 7 + 1) * (rank + 1), exact in every supported type."""
    return _tile(count, rank + 1, dtype, device)


def expected(count: int, world: int, op: str, dtype: Any, device: Any) -> Any:
    """The all-reduce result of pattern() over all ranks."""
    factor = {"sum": world * (world + 1) // 2, "max": world, "min": 1}[op]
    return _tile(count, factor, dtype, device)


def count_wrong(result: Any, want: Any, world: int, chunk: int = 1 << 28) -> int:
    """Elements of result that differ from want, compared chunk by chunk.

    Integer and 32/64-bit float sums of the pattern are exact; 16-bit floats may round once the
    partial sums outgrow their mantissa, so they get a relative tolerance of world * eps.
    """
    torch = _torch()
    wrong = 0
    rounding = result.dtype in (torch.float16, torch.bfloat16)
    tolerance = torch.finfo(result.dtype).eps * world if rounding else 0.0
    for start in range(0, result.numel(), chunk):
        got, ref = result[start : start + chunk], want[start : start + chunk]
        bad = (got.float() - ref.float()).abs() > tolerance * ref.float().abs() if rounding else got != ref
        wrong += int(bad.sum().item())
    return wrong


@dataclass
class Bench:
    """Per-rank state of a benchmark run."""

    args: argparse.Namespace
    launch: Launch
    cuda: bool
    device: Any
    dtype: Any
    reduce_op: Any
    send: Any
    recv: Any

    def sync(self) -> None:
        """Wait for queued GPU work (nothing to do on CPU)."""
        if self.cuda:
            _torch().cuda.synchronize(self.device)

    def all_reduce(self, tensor: Any) -> None:
        """Blocking all-reduce of one tensor."""
        _torch().distributed.all_reduce(tensor, op=self.reduce_op)

    def step(self, count: int, in_place: bool) -> Callable[[], None]:
        """One measured operation: all_reduce(buf), or copy then all_reduce for out-of-place."""
        recv, send = self.recv[:count], self.send[:count]
        if in_place:
            return lambda: self.all_reduce(recv)

        def out_of_place() -> None:
            recv.copy_(send)
            self.all_reduce(recv)

        return out_of_place

    def timed(self, count: int, in_place: bool) -> float:
        """Seconds per operation on this rank, over args.iters back-to-back operations."""
        op = self.step(count, in_place)
        for _ in range(self.args.warmup_iters):
            op()
        _torch().distributed.barrier()
        self.sync()
        start = time.perf_counter()
        for _ in range(self.args.iters):
            op()
        self.sync()
        return (time.perf_counter() - start) / self.args.iters

    def wrong(self, count: int, in_place: bool) -> int | None:
        """Wrong elements on this rank after one operation on fresh data; None with -c 0."""
        if not self.args.check:
            return None
        rank, world = self.launch.rank, self.launch.world
        self.send[:count].copy_(pattern(count, rank, self.dtype, self.device))
        if in_place:
            self.recv[:count].copy_(self.send[:count])
        self.step(count, in_place)()
        want = expected(count, world, self.args.op, self.dtype, self.device)
        return count_wrong(self.recv[:count], want, world)

    def summed(self, values: list[float]) -> list[float]:
        """Sum values over all ranks."""
        torch = _torch()
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
        return [float(v) for v in t.tolist()]

    def measure(self, size: int, in_place: bool) -> Placement:
        """Time and check one placement of one size; ranks' times are averaged, wrongs summed."""
        elem = self.send.element_size()
        count = size // elem
        seconds = self.timed(count, in_place)
        wrong = self.wrong(count, in_place)
        total_seconds, total_wrong = self.summed([seconds, float(wrong or 0)])
        avg_seconds = total_seconds / self.launch.world
        algbw, busbw = bandwidths(count * elem, avg_seconds, self.launch.world)
        return Placement(avg_seconds * 1e6, algbw, busbw, None if wrong is None else int(total_wrong))


def make_bench(args: argparse.Namespace, launch: Launch, cuda: bool) -> Bench:
    """Allocate the buffers for the largest size and fill the send buffer."""
    torch = _torch()
    device = (
        torch.device("cuda", launch.local_rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    )
    dtype = getattr(torch, DTYPES[args.datatype])
    max_count = max(args.maxbytes // torch.tensor([], dtype=dtype).element_size(), 1)
    send = pattern(max_count, launch.rank, dtype, device)
    recv = torch.empty_like(send)
    reduce_op = {"sum": "SUM", "max": "MAX", "min": "MIN"}[args.op]
    return Bench(
        args, launch, cuda, device, dtype, getattr(torch.distributed.ReduceOp, reduce_op), send, recv
    )


def emit(launch: Launch, lines: list[str]) -> None:
    """Print lines on rank 0 only."""
    if launch.rank == 0:
        print("\n".join(lines), flush=True)


def run_sweep(bench: Bench) -> tuple[int, float]:
    """Measure every size, print its row; return (out-of-bounds count, average busbw)."""
    args, launch = bench.args, bench.launch
    type_name = TYPE_NAMES.get(DTYPES[args.datatype], DTYPES[args.datatype])
    elem = bench.send.element_size()
    out_of_bounds, busbws = 0, []
    for size in sizes(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes):
        count = size // elem
        if count == 0:
            continue
        oop, ip = bench.measure(size, in_place=False), bench.measure(size, in_place=True)
        out_of_bounds += sum(1 for half in (oop, ip) if half.wrong)
        busbws += [oop.busbw, ip.busbw]
        emit(launch, [fmt_row(count * elem, count, type_name, args.op, oop, ip)])
    return out_of_bounds, sum(busbws) / len(busbws) if busbws else 0.0


def worker(launch: Launch, args: argparse.Namespace) -> int:
    """Body of one rank: set up the process group, run the sweep, print on rank 0."""
    torch = _torch()
    cuda = use_cuda(args)
    if cuda:
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
    else:
        torch.set_num_threads(1)
    options: dict[str, Any] = {"device_id": torch.device("cuda", torch.cuda.current_device())} if cuda else {}
    torch.distributed.init_process_group(
        backend="nccl" if cuda else "gloo",
        rank=launch.rank,
        world_size=launch.world,
        timeout=datetime.timedelta(seconds=args.timeout),
        **options,
    )
    try:
        bench = make_bench(args, launch, cuda)
        infos: list[Any] = [None] * launch.world
        torch.distributed.all_gather_object(infos, local_info(cuda, bench.device))
        emit(launch, header_lines(args, launch.world, versions_text(cuda)))
        emit(launch, [device_line(r, info) for r, info in enumerate(infos)] + table_header())
        out_of_bounds, avg_busbw = run_sweep(bench)
        emit(launch, footer_lines(out_of_bounds, avg_busbw))
        return 1 if out_of_bounds else 0
    finally:
        torch.distributed.destroy_process_group()


def launcher_env(environ: dict[str, str] | None = None) -> Launch | None:
    """Rank layout given by torchrun (RANK/WORLD_SIZE/LOCAL_RANK) or srun (SLURM_*), if any."""
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" in env and "RANK" in env:
        return Launch(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0")))
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env and "MASTER_ADDR" in env:
        return Launch(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", "0")))
    return None


def free_port() -> int:
    """A free TCP port on the loopback interface for the rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawned(index: int, world: int, args: argparse.Namespace) -> None:
    """Entry point of a process started by spawn_all()."""
    code = worker(Launch(index, world, index), args)
    if code:
        sys.exit(code)


def spawn_all(args: argparse.Namespace) -> int:
    """Start one process per GPU (or -g N, or 2 on CPU) on this host and wait for them."""
    torch = _torch()
    cuda = use_cuda(args)
    visible = torch.cuda.device_count() if cuda else 0
    nprocs = args.ngpus or (visible if cuda else 2)
    if nprocs < 1 or (cuda and nprocs > visible):
        print(f"{TOOL}: {nprocs} processes but {visible} GPUs visible (use --device cpu?)", file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    try:
        torch.multiprocessing.spawn(spawned, args=(nprocs, args), nprocs=nprocs, join=True)
    except torch.multiprocessing.ProcessExitedException as exc:
        return exc.exit_code or 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark under a launcher, or start the processes here."""
    args = parse_args(argv)
    launch = launcher_env()
    if launch is not None:
        os.environ.setdefault("MASTER_PORT", "29500")
        return worker(launch, args)
    return spawn_all(args)


if __name__ == "__main__":
    sys.exit(main())
