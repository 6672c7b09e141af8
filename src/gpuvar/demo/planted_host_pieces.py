"""A planted Nsight Systems export WITH host tables: every case where a piece boundary, or a streaming sweep over
the launches in call order, could place a launch differently from the in-memory join (issue 38).

Why: gpuvar.ingest.call_sites joins each kernel and copy to its CUDA API call (same process, same correlationId),
the call to the innermost NVTX push/pop range enclosing the call's start on the call's thread (its launching op)
and to its step, over the whole trace at once. An ingest in bounded memory must place every launch the same way
from parts of the tables. This export is a PyTorch-like training loop as `nsys profile --trace=cuda,nvtx` records
it under `torch.autograd.profiler.emit_nvtx()` (texts "aten::addmm, seq = 12, op_id = 345"), with these traps
(iteration numbers count from 0; `loops` must be at least MIN_LOOPS):

  * two processes: A (pid 1001, device 0) with its main thread (tid 1001) and the autograd backward thread
    (tid 1013), B (pid 2002, device 1) with its main thread. Both processes number their correlation ids from the
    same base, so the same correlationId means different calls in A and B (the join needs the process id);
  * the backward thread launches ops the main thread launches too (aten::mm, aten::add_: '@t' call sites), and
    its calls interleave in time with the main thread's aten::copy_ and aten::add_; in every iteration the main
    thread's aten::add_ call starts at the same ns as the backward thread's first aten::add_ call (a tie in call
    start between threads; the backward thread's call has the lower correlation id). B launches aten::mm too;
  * nested ranges: aten::linear encloses aten::t (launches nothing; both start at the same ns as the iteration's
    "step N" range in layer 0) and aten::addmm (the GEMM), and launches bias_act_kernel directly itself; the three
    layers make occurrences 0, 1, 2 of aten::linear, aten::addmm and aten::relu per step; aten::nll_loss_nd
    launches three kernels (call_index 0..2); aten::_foreach_add_ two; aten::view, aten::empty, aten::t launch
    nothing; aten::to > aten::_to_copy > aten::copy_ nest three deep around a copy;
  * a range ending exactly at a call's start: in layer 2, aten::addmm ends at the ns its parent's bias_act_kernel
    call starts (ranges are closed: the in-memory join gives that launch to aten::addmm, 'aten::addmm#2.1'); in
    layer 1, aten::view ends at the ns aten::relu and its call start (the launch is aten::relu's);
  * launches outside any op: elementwise_kernel on A's main thread and b_scale_kernel on B ('step#0'), inside an
    NVTX start/end range (eventType 60, started on the main thread and ended on the backward thread) that is no
    op; an NVTX mark (eventType 34) named like a step ("iteration N") in every iteration, which marks no step;
    NCCL's domain (eventType 75) and its registered string "ncclAllReduce" (B's op, through textId);
  * a kernel whose API call is not in the runtime table (iteration 7, the second aten::relu's relu_kernel: that
    step's third aten::relu becomes occurrence 1) and a kernel with a NULL correlationId (iteration 11,
    nll_loss_reduce_kernel: nll_loss_scale_kernel becomes call_index 1); a copy whose call is missing (iteration 6,
    the host-to-device copy);
  * a CUDA-graph replay: one cudaGraphLaunch per iteration inside CUDAGraph::replay whose correlationId three
    kernels share (graph_gather/graph_norm/graph_scatter_kernel on stream 13, call_index 0..2);
  * a deep queue: stream 7 of device 0 has more work per iteration than the host takes to issue it, so its GPU
    starts lag their calls by many iterations (~30 by the end of 60 loops) while stream 13's graph kernels and stream 51's
    copies start at once: kernel rows (GPU start order) differ from call order across streams. With
    steps="sync" the host waits in cudaDeviceSynchronize at the end of each iteration, so the queue drains there;
  * copies (CUPTI_ACTIVITY_KIND_MEMCPY) launched by cudaMemcpyAsync inside aten::copy_: host-to-device on stream
    51 while the backward runs, device-to-host on stream 7 (queued) at the end of the iteration;
  * kernel name drift: the forward GEMM is gemm_tile64_kernel or gemm_tile128_kernel by the iteration's size, so
    the iterations are still found from the repeating pattern (steps="none");
  * rows the reader drops: the second multi_tensor_apply_kernel (aten::_foreach_add_'s call_index 1) of
    iterations 5 and 9 ends before it starts, that of iteration 13 has a NULL end; the first bias_act_kernel row of
    iteration 4 is stored twice (an exact duplicate: it gets 'aten::linear#0.1');
  * non-launching API calls (cudaStreamIsCapturing, cudaEventRecord) with correlation ids of their own.
Steps (the `steps` argument): "nvtx": a pushpop range "step N" on A's main thread encloses iteration N's calls of
both processes (B's iteration runs within A's: the in-memory ingest judges a step by the call's time alone);
"sync": a cudaDeviceSynchronize call on A's main thread ends each iteration, no step ranges; "none": neither,
the steps come from the repeating launch pattern of each (process, device).
Rows are stored as nsys writes them (gpuvar.demo.planted_host_tables). Same seed, same bytes; at the default 60
loops 2,341 kernel rows, 120 copies, ~2,460 API calls, ~3,400 NVTX events. planted_host_scaled writes a big one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuvar.demo.nsys_writer import (
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    mangled_name,
)
from gpuvar.demo.planted_host_tables import (
    API_NAMES,
    COMPUTE_STREAM,
    COPY_STREAM,
    DEVICE_A,
    DEVICE_B,
    DEVICE_SYNC,
    EVENT_RECORD,
    GRAPH_LAUNCH,
    GRAPH_STREAM,
    IS_CAPTURING,
    LAUNCH,
    MEMCPY_ASYNC,
    NVTX_COLUMNS,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    PID_A,
    PID_B,
    RUNTIME_COLUMNS,
    STREAM_B,
    THREAD_NAMES,
    TID_BACKWARD_A,
    TID_MAIN_A,
    TID_MAIN_B,
    flushed_in_blocks,
    global_id,
    insert_rows,
    memcpy_rows,
    write_common,
)
from gpuvar.output import replacing

CORRELATION_BASE = 1_000  # both processes count from here: correlation ids repeat across processes
MIN_LOOPS = 16
STEP_MODES = ("nvtx", "sync", "none")
RUNTIME_BLOCK = 48  # API calls per flushed per-thread buffer
NCCL_DOMAIN = 1
# the traps' iterations (module docstring)
DUPLICATE_ITERATION = 4
END_BEFORE_START_ITERATIONS = (5, 9)
COPY_WITHOUT_CALL_ITERATION = 6
KERNEL_WITHOUT_CALL_ITERATION = 7
NULL_CORRELATION_ITERATION = 11
NULL_END_ITERATION = 13
# the op that launches each kernel (outside the traps above); None: no op encloses its call
KERNEL_OPS = {
    "gemm_tile64_kernel": "aten::addmm",
    "gemm_tile128_kernel": "aten::addmm",
    "bias_act_kernel": "aten::linear",
    "relu_kernel": "aten::relu",
    "gemv_head_kernel": "aten::mm",
    "nll_loss_forward_kernel": "aten::nll_loss_nd",
    "nll_loss_reduce_kernel": "aten::nll_loss_nd",
    "nll_loss_scale_kernel": "aten::nll_loss_nd",
    "elementwise_kernel": None,
    "graph_gather_kernel": "CUDAGraph::replay",
    "graph_norm_kernel": "CUDAGraph::replay",
    "graph_scatter_kernel": "CUDAGraph::replay",
    "add_metric_kernel": "aten::add_",
    "threshold_backward_kernel": "aten::threshold_backward",
    "gemm_dgrad_kernel": "aten::mm",
    "gemm_wgrad_kernel": "aten::mm",
    "reduce_bias_grad_kernel": "aten::sum",
    "accumulate_grad_kernel": "aten::add_",
    "multi_tensor_apply_kernel": "aten::_foreach_add_",
    "gemm_b_kernel": "aten::mm",
    "ncclDevKernel_AllReduce_Sum_f32": "ncclAllReduce",
    "b_scale_kernel": None,
}
LAUNCH_LATENCY_NS = 3_000  # from a launch call's start to the earliest GPU start
ITERATION_GAP_NS = 4_000


@dataclass
class _Call:
    start: int
    end: int
    pid: int
    tid: int
    api: str
    launches: list = field(default_factory=list)
    corr: int | None = None
    tie_first: bool = False  # at an equal start, this call took its correlation id first
    recorded: bool = True  # False: its row is left out of the runtime table (a trap)


@dataclass
class _Launch:
    kind: str  # 'kernel' | 'copy'
    device: int
    stream: int
    name: str
    duration: int
    grid: int = 1
    bytes: int = 0
    copy_kind: int = 0
    graph_node: int | None = None
    call: _Call | None = None
    start: int = 0
    end: int = 0
    trap: str | None = None  # 'null corr', 'end before start', 'null end', 'duplicate'


class _Host:
    """The host side as it is recorded: NVTX events and API calls per thread, with the per-process op_id/seq
    counters emit_nvtx numbers its ranges with."""

    def __init__(self):
        self.nvtx: list[dict] = []
        self.calls: list[_Call] = []
        self.op_id = {PID_A: 100, PID_B: 100}
        self.seq = {PID_A: 10, PID_B: 10}
        self.range_id = 0


class _Thread:
    def __init__(self, host: _Host, pid: int, tid: int, t: int):
        self.host, self.pid, self.tid, self.t = host, pid, tid, t

    @property
    def gtid(self) -> int:
        return global_id(self.pid, self.tid)

    def push(
        self, name: str | None, seq: bool = False, sizes: str | None = None, text_id: int | None = None, emit=True
    ):
        """Open an emit_nvtx range (its end is set by pop); emit False: a user's range (torch.cuda.nvtx.range_push,
        its text as given); `name` None with text_id: a registered string."""
        text = name
        if name is not None and emit:
            self.host.op_id[self.pid] += 1
            parts = [name]
            if seq:
                self.host.seq[self.pid] += 1
                parts.append(f"seq = {self.host.seq[self.pid]}")
            parts.append(f"op_id = {self.host.op_id[self.pid]}")
            if sizes is not None:
                parts.append(f"sizes = {sizes}")
            text = ", ".join(parts)
        row = {
            "start": self.t,
            "end": None,
            "eventType": NVTX_PUSHPOP,
            "text": text,
            "globalTid": self.gtid,
            "textId": text_id,
            "domainId": NCCL_DOMAIN if text_id is not None else 0,
        }
        self.host.nvtx.append(row)
        return row

    def pop(self, row: dict) -> None:
        row["end"] = self.t

    def mark(self, text: str) -> None:
        self.host.nvtx.append(
            {"start": self.t, "eventType": NVTX_MARK, "text": text, "globalTid": self.gtid, "domainId": 0}
        )

    def call(self, api: str, launches=(), duration: int = 4_000, gap: int = 600) -> _Call:
        c = _Call(self.t, self.t + duration, self.pid, self.tid, api, list(launches))
        for launch in c.launches:
            launch.call = c
        self.host.calls.append(c)
        self.t = c.end + gap
        return c

    def wait(self, ns: int) -> None:
        self.t += int(ns)


def _kernel(name: str, duration: int, stream: int = COMPUTE_STREAM, device: int = DEVICE_A, grid: int = 64):
    return _Launch("kernel", device, stream, name, int(duration), grid=grid)


def _copy(copy_kind: int, size: int, stream: int) -> _Launch:
    return _Launch("copy", DEVICE_A, stream, "copy", 1_000 + size // 20_000, bytes=size, copy_kind=copy_kind)


def _op(th: _Thread, name: str, launches, seq: bool = False, sizes: str | None = None, pad: int = 500) -> dict:
    """An op range on `th` that launches each of `launches` (a list of _Launch lists, one call each)."""
    row = th.push(name, seq, sizes)
    th.wait(pad)
    for group in launches:
        th.call(LAUNCH if group[0].kind == "kernel" else MEMCPY_ASYNC, group)
    th.wait(pad)
    th.pop(row)
    th.wait(300)
    return row


def _forward(main: _Thread, i: int, size: int, rng: np.random.Generator, steps: str) -> dict | None:
    """A's main thread, iteration i up to the loss and the graph replay; returns the open step range or None."""
    step = main.push(f"step {i}", emit=False) if steps == "nvtx" else None
    gemm = "gemm_tile64_kernel" if size < 5 else "gemm_tile128_kernel"
    m = 256 * size
    for layer in range(3):
        linear = main.push("aten::linear", seq=True)  # aten::t starts at the same ns
        t = main.push("aten::t")
        main.wait(1_200)
        main.pop(t)
        main.wait(300)
        addmm = main.push("aten::addmm", seq=True, sizes=f"[[1024], [{m}, 1024], [1024, 1024]]")
        main.wait(400)
        main.call(LAUNCH, [_kernel(gemm, 5_500 * size + int(rng.integers(0, 2_000)), grid=128 * size)])
        bias = _kernel("bias_act_kernel", 2_500 + int(rng.integers(0, 500)))
        if layer == 2:  # aten::addmm ends at the ns the bias call starts
            main.pop(addmm)
            main.call(LAUNCH, [bias])
        else:
            main.wait(300)
            main.pop(addmm)
            main.wait(600)
            main.call(LAUNCH, [bias])
        main.wait(400)
        main.pop(linear)
        main.wait(300)
        if layer == 1:  # aten::view ends where aten::relu and its call start
            view = main.push("aten::view")
            main.wait(900)
            main.pop(view)
            relu = main.push("aten::relu", seq=True)
            main.call(LAUNCH, [_kernel("relu_kernel", 2_000 + int(rng.integers(0, 500)))])
            main.wait(300)
            main.pop(relu)
            main.wait(300)
        else:
            _op(main, "aten::relu", [[_kernel("relu_kernel", 2_000 + int(rng.integers(0, 500)))]], seq=True)
    _op(main, "aten::mm", [[_kernel("gemv_head_kernel", 3_000)]], seq=True, sizes=f"[[{m}, 1024], [1024, 16]]")
    _op(main, "aten::empty", [])
    nll = [[_kernel(n, 1_500)] for n in ("nll_loss_forward_kernel", "nll_loss_reduce_kernel", "nll_loss_scale_kernel")]
    _op(main, "aten::nll_loss_nd", nll, seq=True)
    main.mark(f"iteration {i}")  # a mark named like a step: no step, no op
    return step


def _graph_and_outside(main: _Thread, i: int, host: _Host) -> dict:
    """The launch outside any op (inside a start/end range that is no op) and the CUDA-graph replay; returns the
    start/end range, ended later on the backward thread."""
    host.range_id += 1
    prefetch = {
        "start": main.t,
        "end": None,
        "eventType": NVTX_STARTEND,
        "rangeId": host.range_id,
        "text": f"prefetch batch {i + 1}",
        "globalTid": main.gtid,
        "endGlobalTid": global_id(PID_A, TID_BACKWARD_A),
        "domainId": 0,
    }
    host.nvtx.append(prefetch)
    main.wait(500)
    main.call(LAUNCH, [_kernel("elementwise_kernel", 1_800)])
    main.call(IS_CAPTURING, duration=900)
    replay = main.push("CUDAGraph::replay")
    main.wait(400)
    graph = [
        _kernel(name, 2_000, stream=GRAPH_STREAM)
        for name in ("graph_gather_kernel", "graph_norm_kernel", "graph_scatter_kernel")
    ]
    for node, launch in enumerate(graph):
        launch.graph_node = 9_000 + node
    main.call(GRAPH_LAUNCH, graph, duration=7_000)
    main.wait(300)
    main.pop(replay)
    main.call(EVENT_RECORD, duration=1_200)
    return prefetch


def _backward(back: _Thread, size: int, rng: np.random.Generator) -> int:
    """A's backward thread, layers 2, 1, 0; returns the start of its first aten::add_ call (the tie)."""
    tie = None
    for layer in (2, 1, 0):
        relu_b = back.push("ReluBackward0", seq=True)
        _op(back, "aten::threshold_backward", [[_kernel("threshold_backward_kernel", 2_200)]])
        back.pop(relu_b)
        addmm_b = back.push("AddmmBackward0", seq=True)
        _op(back, "aten::t", [])
        for name in ("gemm_dgrad_kernel", "gemm_wgrad_kernel"):
            _op(back, "aten::mm", [[_kernel(name, 5_500 * size + int(rng.integers(0, 2_000)), grid=128 * size)]])
        _op(back, "aten::sum", [[_kernel("reduce_bias_grad_kernel", 1_500)]])
        back.pop(addmm_b)
        accumulate = back.push("torch::autograd::AccumulateGrad")
        add = back.push("aten::add_")
        back.wait(500)
        if tie is None:
            tie = back.t
        back.call(LAUNCH, [_kernel("accumulate_grad_kernel", 1_200)])
        back.wait(300)
        back.pop(add)
        back.pop(accumulate)
        back.wait(800)
    return tie


def _iteration_b(b: _Thread, rng: np.random.Generator, nccl_text_id: int) -> None:
    """Process B's loop: aten::mm twice around NCCL's all-reduce (a registered string), one launch outside ops."""
    _op(b, "aten::mm", [[_kernel("gemm_b_kernel", 4_000, stream=STREAM_B, device=DEVICE_B)]], seq=True)
    nccl = b.push(None, text_id=nccl_text_id)
    b.wait(700)
    b.call(LAUNCH, [_kernel("ncclDevKernel_AllReduce_Sum_f32", 6_000 + int(rng.integers(0, 3_000)), STREAM_B, 1)])
    b.wait(400)
    b.pop(nccl)
    _op(b, "aten::mm", [[_kernel("gemm_b_kernel", 4_000, stream=STREAM_B, device=DEVICE_B)]], seq=True)
    b.call(LAUNCH, [_kernel("b_scale_kernel", 1_000, stream=STREAM_B, device=DEVICE_B)])


def _number_calls(calls: list[_Call], next_corr: dict) -> None:
    """Correlation ids in call order per process (at an equal start the call marked tie_first first)."""
    for c in sorted(calls, key=lambda c: (c.pid, c.start, not c.tie_first, c.tid)):
        c.corr = next_corr[c.pid]
        next_corr[c.pid] += 1


def _run_gpu(calls: list[_Call], free: dict) -> None:
    """GPU times of the launches of `calls`: each stream runs its launches in call order, one at a time."""
    for c in sorted(calls, key=lambda c: (c.pid, c.corr)):
        for launch in c.launches:
            key = (launch.device, launch.stream)
            launch.start = max(c.start + LAUNCH_LATENCY_NS, free.get(key, 0))
            launch.end = launch.start + launch.duration
            free[key] = launch.end + 800


def _simulate(loops: int, rng: np.random.Generator, steps: str, nccl_text_id: int) -> tuple[_Host, list[_Launch]]:
    host = _Host()
    main = _Thread(host, PID_A, TID_MAIN_A, 1_000_000)
    back = _Thread(host, PID_A, TID_BACKWARD_A, 0)
    b = _Thread(host, PID_B, TID_MAIN_B, 0)
    next_corr = {PID_A: CORRELATION_BASE, PID_B: CORRELATION_BASE}
    free: dict = {}
    launches: list[_Launch] = []
    for i in range(loops):
        first_call = len(host.calls)
        t0 = main.t
        size = int(rng.integers(1, 9))
        step = _forward(main, i, size, rng, steps)
        prefetch = _graph_and_outside(main, i, host)
        back.t = main.t + 2_000
        tie = _backward(back, size, rng)
        prefetch["end"] = back.t  # ended on the backward thread
        h2d = _copy(1, int(rng.integers(1 << 20, 1 << 24)), COPY_STREAM)
        _op(main, "aten::copy_", [[h2d]])
        if main.t > tie - 700:
            raise AssertionError("the backward thread's first aten::add_ came before the main thread was free")
        main.t = tie - 700
        add = main.push("aten::add_", seq=True)
        main.wait(700)
        main.call(LAUNCH, [_kernel("add_metric_kernel", 1_500)]).tie_first = False
        next(c for c in host.calls[first_call:] if c.tid == TID_BACKWARD_A and c.start == tie).tie_first = True
        main.wait(300)
        main.pop(add)
        main.t = max(main.t, back.t) + 2_000  # joins the backward
        optimizer = main.push("Optimizer.step#SGD.step")
        _op(main, "aten::_foreach_add_", [[_kernel("multi_tensor_apply_kernel", 3_000)] for _ in range(2)])
        main.wait(400)
        main.pop(optimizer)
        to = main.push("aten::to")
        to_copy = main.push("aten::_to_copy")
        _op(main, "aten::copy_", [[_copy(2, 4_096, COMPUTE_STREAM)]])
        main.pop(to_copy)
        main.wait(200)
        main.pop(to)
        b.t = t0 + 15_000
        _iteration_b(b, rng, nccl_text_id)
        if b.t >= main.t:
            raise AssertionError("process B's iteration must end within process A's")
        calls = host.calls[first_call:]
        _number_calls(calls, next_corr)
        _run_gpu(calls, free)
        for c in calls:
            launches.extend(c.launches)
        if steps == "sync":  # waits until device 0 has run everything launched so far
            drained = max(end for (device, _), end in free.items() if device == DEVICE_A)
            sync = main.call(DEVICE_SYNC, duration=max(drained - main.t, 0) + 2_000)
            sync.corr = next_corr[PID_A]
            next_corr[PID_A] += 1
        main.wait(1_000)
        if step is not None:
            main.pop(step)
        main.wait(ITERATION_GAP_NS)
        _plant_iteration_traps(i, calls)
    return host, launches


def _named(calls: list[_Call], name: str) -> list[_Launch]:
    return [x for c in calls for x in c.launches if x.name == name]


def _plant_iteration_traps(i: int, calls: list[_Call]) -> None:
    if i == KERNEL_WITHOUT_CALL_ITERATION:
        _named(calls, "relu_kernel")[1].call.recorded = False
    if i == COPY_WITHOUT_CALL_ITERATION:
        next(x for c in calls for x in c.launches if x.kind == "copy" and x.copy_kind == 1).call.recorded = False
    if i == NULL_CORRELATION_ITERATION:
        _named(calls, "nll_loss_reduce_kernel")[0].trap = "null corr"
    if i in END_BEFORE_START_ITERATIONS:
        _named(calls, "multi_tensor_apply_kernel")[1].trap = "end before start"
    if i == NULL_END_ITERATION:
        _named(calls, "multi_tensor_apply_kernel")[1].trap = "null end"
    if i == DUPLICATE_ITERATION:
        _named(calls, "bias_act_kernel")[0].trap = "duplicate"


def string_ids(nccl: str) -> dict[str, int]:
    """StringIds: kernel names and their mangled forms, API names, thread names, NCCL's registered string."""
    values = [nccl, *API_NAMES, *sorted(set(THREAD_NAMES.values()))]
    for name in KERNEL_OPS:
        values += [name, mangled_name(name)]
    return {v: j + 1 for j, v in enumerate(dict.fromkeys(values))}


def _kernel_rows(launches: list[_Launch], ids: dict[str, int]) -> list[tuple]:
    kernels = sorted((x for x in launches if x.kind == "kernel"), key=lambda x: (x.start, x.call.pid, x.call.corr))
    rows = []
    for grid_id, x in enumerate(kernels, start=1):
        end = {"end before start": x.start - 1_000, "null end": None}.get(x.trap, x.end)
        values = {
            "start": x.start,
            "end": end,
            "deviceId": x.device,
            "contextId": 1,
            "greenContextId": 0,
            "streamId": x.stream,
            "correlationId": None if x.trap == "null corr" else x.call.corr,
            "globalPid": global_id(x.call.pid),
            "demangledName": ids[x.name],
            "shortName": ids[x.name],
            "mangledName": ids[mangled_name(x.name)],
            "launchType": 0,
            "cacheConfig": 0,
            "registersPerThread": 32,
            "gridX": x.grid,
            "gridY": 1,
            "gridZ": 1,
            "blockX": 256,
            "blockY": 1,
            "blockZ": 1,
            "staticSharedMemory": 0,
            "dynamicSharedMemory": 0,
            "localMemoryPerThread": 0,
            "localMemoryTotal": 0,
            "gridId": grid_id,
            "sharedMemoryExecuted": 32_768,
            "graphNodeId": x.graph_node,
            "sharedMemoryLimitConfig": 0,
        }
        row = tuple(values[c] for c in KERNEL_COLUMNS)
        rows.append(row)
        if x.trap == "duplicate":
            rows.append(row)
    return rows


def _runtime_rows(calls: list[_Call], ids: dict[str, int]) -> list[tuple]:
    kept = [c for c in calls if c.recorded]
    thread = np.array([global_id(c.pid, c.tid) for c in kept], dtype=np.int64)
    start = np.array([c.start for c in kept], dtype=np.int64)
    end = np.array([c.end for c in kept], dtype=np.int64)
    rows = []
    for j in flushed_in_blocks(thread, start, end, RUNTIME_BLOCK).tolist():
        c = kept[j]
        rows.append((c.start, c.end, 0, int(thread[j]), c.corr, ids[c.api], 0, None))
    return rows


def _nvtx_rows(host: _Host, nccl_text_id: int) -> list[tuple]:
    events = list(host.nvtx)
    for pid, tid in ((PID_A, TID_MAIN_A), (PID_B, TID_MAIN_B)):  # NCCL creates its domain at start-up
        events.append(
            {
                "start": 900_000,
                "eventType": NVTX_DOMAIN_CREATE,
                "text": "NCCL",
                "globalTid": global_id(pid, tid),
                "domainId": NCCL_DOMAIN,
            }
        )

    def key(e):
        end = e.get("end")
        return (e["start"], end if end is not None else e["start"], e["globalTid"])

    return [tuple(e.get(c) for c in NVTX_COLUMNS) for e in sorted(events, key=key)]


def write_planted_host_export(path: Path, loops: int = 60, seed: int = 0, steps: str = "nvtx") -> Path:
    """Write the export of the module docstring to `path` (steps: 'nvtx', 'sync' or 'none'); returns the path."""
    if steps not in STEP_MODES:
        raise ValueError(f"steps must be one of {', '.join(STEP_MODES)}, not {steps!r}")
    if loops < MIN_LOOPS:
        raise ValueError(f"loops must be at least {MIN_LOOPS} (the traps sit in iterations up to 13)")
    rng = np.random.default_rng(seed)
    ids = string_ids("ncclAllReduce")
    host, launches = _simulate(loops, rng, steps, ids["ncclAllReduce"])
    path = Path(path)
    with replacing(path) as tmp:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=OFF")
            con.execute("BEGIN")
            write_common(con, ids, path, f"loops={loops} seed={seed} steps={steps}")
            insert_rows(con, "CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLUMNS, _kernel_rows(launches, ids))
            insert_rows(con, "CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLUMNS, memcpy_rows(launches))
            insert_rows(con, "CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_COLUMNS, _runtime_rows(host.calls, ids))
            insert_rows(con, "NVTX_EVENTS", NVTX_COLUMNS, _nvtx_rows(host, ids["ncclAllReduce"]))
            con.execute("COMMIT")
        finally:
            con.close()
    return path
