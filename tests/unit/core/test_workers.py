"""The shared worker threads: jobs run on them, and there are only as many as ran at once,
up to the pool's size."""

from __future__ import annotations

import threading

from inferplex.core.workers import WorkerPool


def test_jobs_one_after_another_need_one_thread() -> None:
    pool = WorkerPool(4)
    done: list[int] = []
    for i in range(20):
        finished = threading.Event()
        pool.submit(lambda i, finished=finished: (done.append(i), finished.set()), i)
        assert finished.wait(10)
        # the thread has taken its next turn before the next job comes
        while pool._waiting == 0:
            threading.Event().wait(0.001)
    assert done == list(range(20)) and pool.size == 1
    pool.close()
    assert pool.size == 0


def test_jobs_running_at_once_each_get_a_thread_and_no_more() -> None:
    pool = WorkerPool(4)
    release = threading.Event()
    started = threading.Barrier(4)
    names: set[str] = set()

    def job(_: object) -> None:
        names.add(threading.current_thread().name)
        started.wait(10)  # all four run at once: none waits for a thread
        release.wait(10)

    for i in range(3):
        pool.submit(job, i)
    pool.submit(job, 3)
    release.set()
    pool.close()
    assert len(names) == 4


def test_a_job_that_raises_leaves_its_thread_in_the_pool() -> None:
    pool = WorkerPool(1)

    def failing(_: object) -> None:
        raise RuntimeError("the instance answers its own errors; this one did not")

    pool.submit(failing, None)
    finished = threading.Event()
    pool.submit(lambda _: finished.set(), None)
    assert finished.wait(10)
    pool.close()


def test_jobs_past_the_size_wait_for_a_thread() -> None:
    pool = WorkerPool(2)
    release = threading.Event()
    ran: list[int] = []

    def job(index: int) -> None:
        release.wait(10)
        ran.append(index)

    for index in range(5):
        pool.submit(job, index)
    assert pool.size == 2
    release.set()
    pool.close()
    assert sorted(ran) == [0, 1, 2, 3, 4]
