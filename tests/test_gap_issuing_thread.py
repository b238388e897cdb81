"""A gap is explained first by the thread that launched the work ending it: an ``issuing``
gap is named on that thread (analyses/gapjoin.py ``name_issuing``), and a range, OS wait
or CUDA call of another thread ranks after that thread's own (analyses/gaps.py ``_cover``).
Generated two-thread steps with hand-computed answers, and the H100 nsys training capture
whose backward runs on autograd's thread."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import traceparse
from traceparse import schema
from traceparse.analyses.gaps import idle_gaps
from traceparse.timeline import Timeline

US = 1000
TRAIN = (Path(__file__).resolve().parent.parent / "sample_traces" / "h100_captures"
         / "train_nsys" / "train_gpt2s_b8_eager.sqlite.gz")
OS_WAIT = r"pthread_cond_wait|futex|poll|sem_wait|sleep"


def _tl(acts: list[tuple[int, int, int]], calls: list[tuple[int, int, int, int]],
        ranges: list[tuple[str, str, int, int, int]]) -> Timeline:
    """acts: start, end, corr (us); calls: start, end, corr, thread; ranges: kind, name,
    start, end, thread. One process, one stream."""
    gpu = pl.DataFrame([{"rank": 0, "kind": "kernel", "category": "compute",
                         "start_ns": s * US, "end_ns": e * US, "dur_ns": (e - s) * US,
                         "device_id": 0, "stream_id": 7, "process_id": 1,
                         "correlation_id": c, "name": f"k{c}"} for s, e, c in acts])
    api = pl.DataFrame([{"rank": 0, "kind": "runtime", "name": "cudaLaunchKernel",
                         "start_ns": s * US, "end_ns": e * US, "dur_ns": (e - s) * US,
                         "process_id": 1, "thread_id": t, "correlation_id": c}
                        for s, e, c, t in calls])
    rng = pl.DataFrame([{"rank": 0, "kind": k, "name": n, "start_ns": s * US,
                         "end_ns": e * US, "dur_ns": (e - s) * US, "process_id": 1,
                         "thread_id": t} for k, n, s, e, t in ranges])
    return Timeline(gpu=schema.conform("gpu", gpu), api=schema.conform("api", api),
                    ranges=schema.conform("ranges", rng)).validate()


def test_idle_gap_is_explained_by_the_launching_threads_range() -> None:
    """Thread 1: launch [10, 15) -> kernel [20, 25), user range 'logging' [30, 500) (no
    CUDA call in it: it issues nothing), launch [510, 515) -> kernel [520, 530). Thread 2
    (it launches later: [600, 605) -> [610, 620)) waits in pthread_cond_wait [100, 450).
    GPU idle [25, 520) = 495 us; both rows cover half of it, the wait is the innermost
    (350 < 470 us). The work ending the gap came from thread 1: cpu_work 'logging'."""
    tl = _tl([(20, 25, 1), (520, 530, 2), (610, 620, 3)],
             [(10, 15, 1, 1), (510, 515, 2, 1), (600, 605, 3, 2)],
             [("user_annotation", "logging", 30, 500, 1),
              ("osrt", "pthread_cond_wait", 100, 450, 2)])
    g = idle_gaps(tl).filter(pl.col("start_ns") == 25 * US).row(0, named=True)
    assert (g["dur_ns"], g["kind"]) == (495 * US, "idle")
    assert (g["cause"], g["cause_name"], g["cause_thread_id"]) == ("cpu_work", "logging", 1)
    assert (g["cause_start_ns"], g["cause_end_ns"]) == (30 * US, 500 * US)


def _two_threads() -> Timeline:
    """Main thread 1: NVTX 'forward' [0, 1000) us, launch [10, 15) -> kernel [20, 25),
    pthread_cond_wait [100, 900) (waiting for the backward), launch [910, 915) -> kernel
    [920, 930). Autograd thread 2: launch [200, 205) -> kernel [210, 220), launch [600,
    605) -> kernel [610, 620). GPU idle [220, 610) = 390 us; the kernel ending it was
    launched by thread 2, which records nothing else."""
    return _tl([(20, 25, 1), (210, 220, 2), (610, 620, 3), (920, 930, 4)],
               [(10, 15, 1, 1), (200, 205, 2, 2), (600, 605, 3, 2), (910, 915, 4, 1)],
               [("nvtx_push_pop", "forward", 0, 1000, 1),
                ("osrt", "pthread_cond_wait", 100, 900, 1)])


def test_issuing_gap_is_named_on_the_launching_thread() -> None:
    g = idle_gaps(_two_threads()).filter(pl.col("start_ns") == 220 * US).row(0, named=True)
    # the whole gap is issuing (thread 1's stretch [15, 910) lies in 'forward', which
    # holds both of its launches), but thread 1 was waiting: the work ending the gap came
    # from thread 2, whose only row in the gap is its launch [600, 605): 5 of 390 us
    assert (g["dur_ns"], g["cause"]) == (390 * US, "issuing")
    assert (g["cause_name"], g["cause_thread_id"]) == ("cudaLaunchKernel", 2)
    assert (g["cause_start_ns"], g["cause_end_ns"]) == (600 * US, 605 * US)
    assert g["cause_detail"].startswith("issued by this thread: 100% of the gap")
    assert g["cause_detail"].endswith("this one overlaps 1%")


def test_backward_gaps_name_autograd_thread_not_main_wait() -> None:
    """H100 nsys gpt2s b8: the main thread waits in pthread_cond_wait while autograd's
    thread issues the backward; 7,387 of 9,790 issuing gaps (357 ms) were named by that
    wait, and 9 idle gaps between steps by autograd's thread waiting for work. Each
    issuing gap's named thread launched the kernel that ends the gap; no gap is named by an
    OS wait of a thread that launched nothing during it."""
    tl = traceparse.load(TRAIN)
    g = idle_gaps(tl).filter(pl.col("cause") == "issuing")
    assert g.height > 9000
    named = g["cause_name"].fill_null("")
    assert not named.str.contains(OS_WAIT).any()
    from traceparse.links import launch_join

    nxt = (launch_join(tl).filter(pl.col("kind") != "sync")
           .select("rank", "device_id", pl.col("start_ns").alias("end_ns"),
                   pl.col("api_thread_id").alias("_t")))
    j = g.join(nxt, on=["rank", "device_id", "end_ns"], how="left")
    assert j["_t"].null_count() == 0
    assert (j["cause_thread_id"] == j["_t"]).all()
    assert set(j["cause_thread_id"].unique().to_list()) == {777, 826}
    every = idle_gaps(tl)
    assert every.filter(pl.col("cause") == "os_wait").height == 0
