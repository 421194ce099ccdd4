"""xgrad/_backend/host_cache.pyx: NumPy's data allocator in the importing
thread keeps large freed blocks for the next array of their size; arrays'
contents, alignment and zeroing are NumPy's; the blocks are bounded and
released on request; threads and forks are safe."""

import os
import subprocess
import sys
import threading

import numpy
import pytest

import xgrad
from xgrad._backend import host_cache, workspace

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import get_handler_name

BIG = (512, 512)  # 2 MiB of float64: over host_cache.MIN_BYTES


pytestmark = pytest.mark.usefixtures('fresh_workspace')  # (conftest.py)


def test_numpy_allocates_through_the_cache_in_the_importing_thread():
    assert host_cache.installed()
    assert get_handler_name(numpy.empty(3)) == host_cache.NAME
    assert get_handler_name(numpy.empty(BIG)) == host_cache.NAME
    assert get_handler_name((xgrad.ones(BIG) * 2).to_numpy()) == host_cache.NAME


def test_a_freed_array_s_block_serves_the_next_array_of_its_size():
    a = numpy.ones(BIG)
    address = a.ctypes.data
    del a
    before = xgrad.workspace_stats()
    b = numpy.empty(BIG)
    assert b.ctypes.data == address
    after = xgrad.workspace_stats()
    assert after['hits'] == before['hits'] + 1 and after['misses'] == before['misses']
    # the same number of whole pages: another shape and dtype of that size
    del b
    c = numpy.empty(BIG[0] * BIG[1] * 2 - 7, numpy.float32)
    assert c.ctypes.data == address


def test_large_blocks_are_64_byte_aligned_and_small_ones_as_numpy_s():
    for n in (1, 3, 17, 1000, 1 << 15, 1 << 18, (1 << 18) + 1, 3 << 20):
        a = numpy.empty(n, numpy.uint8)
        assert a.ctypes.data % (64 if n >= host_cache.MIN_BYTES else 16) == 0, n
        assert a.flags.owndata and a.flags.aligned


@pytest.mark.parametrize('make', [
    lambda: numpy.zeros(BIG), lambda: numpy.zeros_like(numpy.empty(BIG)),
    lambda: numpy.zeros(BIG[0] * BIG[1], numpy.int64), lambda: xgrad.zeros(BIG, 'float64').to_numpy()])
def test_zeros_are_zeros_on_a_reused_block(make):
    a = numpy.empty(BIG)
    a.fill(numpy.nan)
    del a
    hits = xgrad.workspace_stats()['hits']
    z = make()
    assert xgrad.workspace_stats()['hits'] > hits
    assert not z.any() and not numpy.isnan(z).any()


@pytest.mark.parametrize('old, new', [(10, 1000), (1000, 10), (10, 1 << 17), (1 << 17, 10),
                                      (1 << 17, 1 << 18), (1 << 18, 1 << 17), (1 << 18, 20000)])
def test_resize_keeps_the_contents(old, new):
    a = numpy.arange(old, dtype=numpy.float64)
    a.resize(new, refcheck=False)
    kept = min(old, new)
    numpy.testing.assert_array_equal(a[:kept], numpy.arange(kept, dtype=numpy.float64))
    assert not a[kept:].any()  # (NumPy zeroes what it grows by)


def test_a_view_keeps_its_block_from_the_next_array():
    a = numpy.full(BIG, 1.0)
    views = [a[::2], a.T, a.reshape(-1), a[3:, 5:]]
    del a
    b = numpy.full(BIG, 2.0)
    for v in views:
        assert not numpy.shares_memory(b, v) and (v == 1).all()


def test_the_limit_bounds_the_kept_blocks_and_release_frees_them():
    arrays = [numpy.empty(BIG) for _ in range(4)]
    size = arrays[0].nbytes
    xgrad.set_workspace_limit(2 * size)
    dropped = xgrad.workspace_stats()['dropped']
    del arrays
    stats = xgrad.workspace_stats()
    assert stats['free_bytes'] == 2 * size and stats['dropped'] == dropped + 2
    xgrad.release_workspace()
    assert xgrad.workspace_stats()['free_bytes'] == 0
    xgrad.set_workspace_limit(0)
    a = numpy.empty(BIG)
    del a
    assert xgrad.workspace_stats()['free_bytes'] == 0


def test_lowering_the_limit_frees_the_blocks_past_it_now():
    arrays = [numpy.empty(n) for n in (1 << 16, 1 << 17, 1 << 18)]
    sizes = sorted(a.nbytes for a in arrays)
    del arrays
    assert xgrad.workspace_stats()['free_bytes'] == sum(sizes)
    xgrad.set_workspace_limit(sizes[0] + sizes[1])
    assert xgrad.workspace_stats()['free_bytes'] == sizes[0] + sizes[1]


def test_threads_never_share_a_live_block():
    """Threads (NumPy's default handler in theirs) and the main thread's
    arrays freed in other threads: every array keeps what its owner wrote."""
    shared = [numpy.empty(BIG) for _ in range(8)]  # the cache's blocks, freed in threads
    errors = []

    def work(k):
        mine = [shared.pop()] if shared else []
        for i in range(100):
            held = [numpy.empty(BIG if (i + j) % 2 else (256, 1024)) for j in range(3)]
            held += [workspace.empty(BIG, numpy.float64)]
            for j, a in enumerate(held):
                a.fill(k * 10 + j)
            for j, a in enumerate(held):
                if not (a == k * 10 + j).all():
                    errors.append((k, i, j))
        del mine
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    held = []
    for i in range(200):  # the main thread, through the cache, meanwhile
        held.append(numpy.full(BIG, float(i)))
        if len(held) > 3:
            a = held.pop(0)
            if not (a == i - 3).all():
                errors.append(('main', i))
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs fork')
def test_a_forked_child_allocates_while_a_thread_held_the_lock():
    script = r'''
import os, threading, numpy, xgrad
stop = False
def churn():
    while not stop:
        a = numpy.empty((512, 512)); del a
t = threading.Thread(target=churn); t.start()
for _ in range(50):
    pid = os.fork()
    if pid == 0:
        b = numpy.full((512, 512), 3.0); del b
        c = numpy.full((512, 512), 4.0)
        os._exit(0 if (c == 4).all() else 1)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
stop = True; t.join(); print('ok')
'''
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == 'ok', out.stderr


_STEP = r'''
import resource, sys, numpy, xgrad
rng = numpy.random.default_rng(0)
x = xgrad.array(rng.standard_normal((1024, 768)).astype('float32')).require_grad()
gamma = xgrad.array(numpy.ones(768, 'float32')).require_grad()
def step():  # a layer norm from primitives: its temporaries are NumPy's outputs
    mu = xgrad.mean(x, axis=1, keepdims=True)
    d = x - mu
    y = d / xgrad.sqrt(xgrad.mean(d * d, axis=1, keepdims=True) + 1e-5) * gamma
    xgrad.sum(y * y).backward()
    x.cleargrad(); gamma.cleargrad()
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
stats = xgrad.workspace_stats()
for _ in range(5):
    step()
after = xgrad.workspace_stats()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5,
      after['hits'] - stats['hits'], after['misses'] - stats['misses'])
'''


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='counts Linux page faults')
def test_a_step_of_composed_ops_takes_its_arrays_from_kept_blocks():
    """Counted, not timed: after warm-up, every large array of the step
    (NumPy's outputs in the ops, the gradients) comes from kept blocks, and
    the step faults in no more pages than with the cache off."""
    def run(limit):
        env = dict(os.environ, XGRAD_WORKSPACE_LIMIT=str(limit), OMP_NUM_THREADS='1')
        out = subprocess.run([sys.executable, '-c', _STEP], env=env, capture_output=True,
                             text=True, check=True)
        return [int(v) for v in out.stdout.split()[-3:]]
    faults_off, hits_off, misses_off = run(0)
    faults_on, hits_on, misses_on = run(workspace.DEFAULT_LIMIT)
    assert hits_on > 10 and misses_on == 0, (hits_on, misses_on)
    assert hits_off == 0, hits_off
    assert faults_on <= faults_off * 1.05 + 16, (faults_on, faults_off)


def test_cache_numpy_memory_switches_the_current_thread_only():
    assert xgrad.cache_numpy_memory(True) is True  # (import xgrad turned it on here)
    seen = {}

    def other():
        seen['before'] = get_handler_name(numpy.empty(BIG))
        seen['previous'] = xgrad.cache_numpy_memory(True)
        seen['after'] = get_handler_name(numpy.empty(BIG))
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {'before': 'default_allocator', 'previous': False,
                    'after': host_cache.NAME}
    try:
        assert xgrad.cache_numpy_memory(False) is True
        a = numpy.empty(BIG)
        assert get_handler_name(a) == 'default_allocator'
    finally:
        xgrad.cache_numpy_memory(True)
    del a  # (freed by the handler that allocated it)


@pytest.mark.parametrize('value, installed', [('0', False), ('1', True), ('', True)])
def test_the_environment_can_leave_numpy_s_allocator_alone(value, installed):
    script = ('import numpy, xgrad; from xgrad._backend import host_cache; '
              'print(host_cache.installed(), xgrad.workspace_stats()["limit"])')
    env = dict(os.environ, XGRAD_CACHE_NUMPY=value)
    out = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == [str(installed), str(workspace.DEFAULT_LIMIT)]
    info = subprocess.run([sys.executable, '-m', 'xgrad', 'info'], env=env, capture_output=True,
                          text=True)
    line = [x for x in info.stdout.splitlines() if x.startswith('host memory:')]
    assert len(line) == 1 and ("NumPy's allocator" in line[0]) == installed, info.stdout
