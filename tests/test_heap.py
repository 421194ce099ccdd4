"""xgrad/_heap.py: freed memory at the top of glibc's heap is kept for the
next step (M_TOP_PAD), unless XGRAD_HEAP_TOP_PAD says otherwise."""

import os
import subprocess
import sys

import pytest

from xgrad import _heap

ON_GLIBC = _heap._glibc() is not None

# Four 2 MiB arrays made and freed together, 20 times: each round's memory
# goes back to the system and faults in again, unless the heap keeps it.
FAULT_PROBE = '''
import resource, numpy, xgrad
def step():
    parts = [numpy.ones(1 << 18) for _ in range(4)]
    return sum(float(p[0]) for p in parts)
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(xgrad._heap.top_pad, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
'''


def _probe(value):
    env = {k: v for k, v in os.environ.items()  # (glibc's own tuning left out)
           if not k.startswith(('MALLOC_', 'GLIBC_TUNABLES', 'XGRAD_HEAP_TOP_PAD'))}
    if value is not None:
        env['XGRAD_HEAP_TOP_PAD'] = value
    out = subprocess.run([sys.executable, '-c', FAULT_PROBE], env=env, check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    pad, faults = out.split()
    return int(pad), int(faults)


@pytest.mark.parametrize('value, expected', [
    (None, _heap.DEFAULT_TOP_PAD), ('', _heap.DEFAULT_TOP_PAD), ('0', 0),
    ('1048576', 1 << 20), (' 4096 ', 4096)])
def test_the_requested_pad(value, expected):
    environ = {} if value is None else {'XGRAD_HEAP_TOP_PAD': value}
    assert _heap.requested_top_pad(environ) == expected


@pytest.mark.parametrize('value', ['64M', '-1', '1.5', str(2 ** 31)])
def test_a_bad_pad_is_warned_about_and_nothing_is_set(value):
    with pytest.warns(RuntimeWarning, match='XGRAD_HEAP_TOP_PAD'):
        assert _heap.requested_top_pad({'XGRAD_HEAP_TOP_PAD': value}) == 0


def test_zero_sets_nothing():
    assert _heap.keep_heap_top(0) == 0


@pytest.mark.skipif(not ON_GLIBC, reason='M_TOP_PAD is glibc\'s')
def test_the_kept_heap_top_saves_the_page_faults_of_each_step():
    pad, kept = _probe(None)
    unset, returned = _probe('0')
    assert (pad, unset) == (_heap.DEFAULT_TOP_PAD, 0)
    if returned < 20 * 1000:  # 8 MiB a round is about 2,000 pages of 4 KiB
        pytest.skip('this C library kept the memory anyway (huge pages?): {} page faults '
                    'in 20 rounds'.format(returned))
    assert kept < returned / 10


@pytest.mark.skipif(ON_GLIBC, reason='on glibc the pad is set')
def test_other_c_libraries_are_left_alone():
    assert _heap.keep_heap_top(1 << 20) == 0
