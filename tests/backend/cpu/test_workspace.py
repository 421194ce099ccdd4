"""xgrad/_backend/workspace.py: the kernels' large arrays over blocks kept
from step to step, bounded, released on request, never handed to two live
arrays at once."""

import os
import subprocess
import sys
import threading

import numpy
import pytest

import xgrad
from xgrad._backend import host_cache, workspace

BIG = (512, 512)  # 1 MiB of float32: over workspace.MIN_BYTES


pytestmark = pytest.mark.usefixtures('fresh_workspace')  # (conftest.py)


def test_a_freed_array_s_block_serves_the_next_request_of_its_size():
    a = workspace.empty(BIG, numpy.float32)
    address = a.ctypes.data
    del a
    before = xgrad.workspace_stats()
    b = workspace.empty(BIG, numpy.float32)
    assert b.ctypes.data == address
    assert xgrad.workspace_stats()['hits'] == before['hits'] + 1
    assert b.shape == BIG and b.dtype == numpy.float32
    assert b.flags.c_contiguous and b.flags.aligned and b.flags.writeable
    assert b.ctypes.data % 64 == 0


def test_a_view_keeps_the_block_from_the_next_request():
    a = workspace.empty(BIG, numpy.float32)
    a.fill(1)
    views = [a[::2], a.T, a.reshape(-1), a[3:, 5:]]
    del a
    b = workspace.empty(BIG, numpy.float32)
    b.fill(2)
    for v in views:
        assert not numpy.shares_memory(b, v)
        assert (v == 1).all()
    del views, v
    assert xgrad.workspace_stats()['free_bytes'] > 0


def test_zeros_are_zeros_on_a_reused_block():
    a = workspace.empty(BIG, numpy.float64)
    a.fill(7)
    del a
    z = workspace.zeros(BIG, numpy.float64)
    assert xgrad.workspace_stats()['hits'] >= 1
    assert not z.any()


def test_small_arrays_are_plain_numpy_arrays():
    a = workspace.empty((8, 8), numpy.float32)
    assert a.base is None and a.flags.owndata


def test_the_limit_bounds_the_kept_blocks():
    arrays = [workspace.empty(BIG, numpy.float32) for _ in range(4)]
    size = arrays[0].nbytes
    assert xgrad.set_workspace_limit(2 * size + 2 * 4096 + 128) == workspace.DEFAULT_LIMIT
    dropped = xgrad.workspace_stats()['dropped']
    del arrays
    stats = xgrad.workspace_stats()
    assert size * 2 <= stats['free_bytes'] <= stats['limit']
    assert stats['dropped'] == dropped + 2
    xgrad.set_workspace_limit(0)  # frees what is kept now, keeps nothing after
    assert xgrad.workspace_stats()['free_bytes'] == 0
    a = workspace.empty(BIG, numpy.float32)
    del a
    assert xgrad.workspace_stats()['free_bytes'] == 0


def test_release_frees_every_kept_block_and_leaves_live_arrays_alone():
    live = workspace.empty(BIG, numpy.float32)
    live.fill(3)
    freed = [workspace.empty(BIG, numpy.float32) for _ in range(3)]
    del freed
    assert xgrad.workspace_stats()['free_bytes'] > 0
    xgrad.release_workspace()
    assert xgrad.workspace_stats()['free_bytes'] == 0
    assert (live == 3).all()


@pytest.mark.parametrize('bad', [-1, 1.5, '10', True, None])
def test_a_bad_limit_is_refused(bad):
    with pytest.raises(ValueError, match='set_workspace_limit'):
        xgrad.set_workspace_limit(bad)
    assert xgrad.workspace_limit() == workspace.DEFAULT_LIMIT


@pytest.mark.skipif(not os.path.exists('/proc/meminfo'), reason='reads /proc/meminfo')
def test_under_memory_pressure_a_returned_block_is_freed():
    assert host_cache.under_pressure(1 << 60)  # (more than any machine has)
    a = workspace.empty(BIG, numpy.float32)
    host_cache._override_pressure(True)
    try:
        dropped = xgrad.workspace_stats()['dropped']
        del a
        stats = xgrad.workspace_stats()
    finally:
        host_cache._override_pressure(None)
    assert stats['free_bytes'] == 0 and stats['dropped'] == dropped + 1


def test_threads_never_share_a_live_block():
    """Four threads taking and returning blocks of two sizes: each array
    keeps the value its thread wrote until the thread drops it."""
    errors = []

    def work(k):
        for i in range(200):
            held = [workspace.empty(BIG if (i + j) % 2 else (256, 1024), numpy.float32)
                    for j in range(3)]
            for j, a in enumerate(held):
                a.fill(k * 10 + j)
            for j, a in enumerate(held):
                if not (a == k * 10 + j).all():
                    errors.append((k, i, j))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


_STEP = r'''
import resource, sys, numpy, xgrad
rng = numpy.random.RandomState(0)
ws = [xgrad.array(rng.standard_normal(s).astype('float32') * 0.1).require_grad()
      for s in ((32, 3, 3, 3), (32, 32, 3, 3), (64, 32, 3, 3))]
x = xgrad.array(rng.rand(16, 3, 32, 32).astype('float32'))
def step():
    h = x
    for w in ws:
        h = xgrad.max_pool(xgrad.relu(xgrad.conv(h, w, pad=1)), 2, 2)
    xgrad.backward((h * h).sum())
    for w in ws:
        w.cleargrad()
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
def test_a_training_step_takes_its_arrays_from_kept_blocks():
    """Counted, not timed: after warm-up, a 3-layer convolutional step at
    batch 16 takes every array it asks the workspace for (columns, tiles,
    outputs) from kept blocks, and faults in no more pages than the same
    step with the workspace off (where glibc's heap may or may not reuse
    the freed memory: which depends on the allocation pattern, so the
    saving is not asserted)."""
    def run(limit):
        env = dict(os.environ, XGRAD_WORKSPACE_LIMIT=str(limit), OMP_NUM_THREADS='1')
        out = subprocess.run([sys.executable, '-c', _STEP], env=env, capture_output=True,
                             text=True, check=True)
        return [int(v) for v in out.stdout.split()[-3:]]
    faults_off, hits_off, misses_off = run(0)
    faults_on, hits_on, misses_on = run(workspace.DEFAULT_LIMIT)
    assert hits_on > 0 and misses_on == 0, (hits_on, misses_on)
    assert hits_off == 0, hits_off  # (the workspace off: nothing kept)
    assert faults_on <= faults_off * 1.05 + 16, (faults_on, faults_off)


def test_a_bad_environment_limit_stops_the_import():
    env = dict(os.environ, XGRAD_WORKSPACE_LIMIT='lots')
    out = subprocess.run([sys.executable, '-c', 'import xgrad'], env=env, capture_output=True,
                         text=True)
    assert out.returncode != 0 and "XGRAD_WORKSPACE_LIMIT='lots'" in out.stderr
