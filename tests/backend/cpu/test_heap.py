"""xgrad/_heap.py: ``import xgrad`` leaves glibc's heap alone; the
process-wide M_TOP_PAD is an opt-in (``xgrad.keep_heap_top`` or
``XGRAD_HEAP_TOP_PAD``).

The import used to set M_TOP_PAD to 64 MiB, which turns glibc's dynamic
mmap threshold off for the whole process: every allocation over 128 KiB,
anyone's, became a fresh mmap faulted in page by page (Chainer's NIN, VGG
and ResNet-50 steps 1.5-2.7x slower). The probe below counts (does not
time) the page faults of a NumPy-only step in a fresh process."""

import os
import subprocess
import sys

import pytest

import xgrad
from xgrad import _heap

ON_GLIBC = _heap._glibc() is not None
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(xgrad.__file__)))

# A NumPy-only step with long-lived arrays beside it (120 MiB, more than any
# pad): the page faults per step. argv[1]: numpy (xgrad never imported),
# xgrad (imported), keep (imported, then xgrad.keep_heap_top(64 MiB)).
FAULT_PROBE = '''
import resource, sys
if sys.argv[1] != "numpy":
    import xgrad
if sys.argv[1] == "keep":
    assert xgrad.keep_heap_top(64 << 20) == 64 << 20
import numpy
t = numpy.empty(1 << 20); del t
live = [numpy.ones(1 << 17) for _ in range(120)]
def step():
    for n in (1 << 17, 1 << 19, 1 << 20):
        a = numpy.empty(n); a.fill(1.0); del a
step(); step()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
pad = sys.modules["xgrad"]._heap.top_pad if "xgrad" in sys.modules else 0
print(pad, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) // 20)
'''


def _probe(mode, heap_top_pad=None, probe=FAULT_PROBE):
    """(the pad xgrad set, page faults per step) in a fresh process."""
    env = {k: v for k, v in os.environ.items()  # (glibc's own tuning left out)
           if not k.startswith(('MALLOC_', 'GLIBC_TUNABLES', 'XGRAD_HEAP_TOP_PAD'))}
    env['PYTHONPATH'] = os.pathsep.join(
        [PACKAGE_PARENT] + [p for p in [os.environ.get('PYTHONPATH')] if p])
    if heap_top_pad is not None:
        env['XGRAD_HEAP_TOP_PAD'] = heap_top_pad
    out = subprocess.run([sys.executable, '-c', probe, mode], env=env, check=True,
                         stdout=subprocess.PIPE, universal_newlines=True, timeout=120).stdout
    pad, faults = out.split()
    return int(pad), int(faults)


# What the opt-in is for: four 2 MiB temporaries made and freed together each
# step, 20 steps. Without the pad glibc hands the freed top of its heap back
# and the next step faults it in again (2,016 faults a step on the 2-core
# VM); with it, none.
STEP_PROBE = '''
import resource, sys, numpy, xgrad
if sys.argv[1] == "keep":
    assert xgrad.keep_heap_top(64 << 20) == 64 << 20
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


def _same_faults(with_xgrad, without):
    return with_xgrad <= without + max(100, without // 20)


@pytest.mark.parametrize('value, expected', [
    (None, 0), ('', 0), ('  ', 0), ('0', 0), ('1048576', 1 << 20), (' 4096 ', 4096)])
def test_the_requested_pad_is_nothing_unless_asked_for(value, expected):
    environ = {} if value is None else {'XGRAD_HEAP_TOP_PAD': value}
    assert _heap.requested_top_pad(environ) == expected


@pytest.mark.parametrize('value', ['64M', '-1', '1.5', str(2 ** 31)])
def test_a_bad_pad_is_warned_about_and_nothing_is_set(value):
    with pytest.warns(RuntimeWarning, match='XGRAD_HEAP_TOP_PAD'):
        assert _heap.requested_top_pad({'XGRAD_HEAP_TOP_PAD': value}) == 0


@pytest.mark.parametrize('nbytes', [-1, 2 ** 31, 1.5, '64', True, None])
def test_keep_heap_top_takes_a_byte_count(nbytes):
    with pytest.raises(ValueError, match='keep_heap_top'):
        xgrad.keep_heap_top(nbytes)


def test_zero_sets_nothing():
    assert xgrad.keep_heap_top(0) == 0


def test_keep_heap_top_is_public_and_says_what_it_costs():
    doc = ' '.join(xgrad.keep_heap_top.__doc__.split())
    assert xgrad.keep_heap_top is _heap.keep_heap_top
    assert 'dynamic mmap threshold' in doc and 'whole process' in doc


@pytest.mark.skipif(not ON_GLIBC, reason='the mmap threshold is glibc\'s')
def test_importing_xgrad_leaves_numpys_page_faults_as_they_were():
    """The probe faults as often with xgrad imported as without (with the
    old import-time M_TOP_PAD: about 1,290 a step against 0 on the 2-core
    VM, every array over 128 KiB a fresh mmap)."""
    unset, with_xgrad = _probe('xgrad')
    _, without = _probe('numpy')
    assert _same_faults(with_xgrad, without), (with_xgrad, without)
    assert unset == 0


@pytest.mark.skipif(not ON_GLIBC, reason='M_TOP_PAD is glibc\'s')
@pytest.mark.parametrize('how', ['keep_heap_top', 'XGRAD_HEAP_TOP_PAD'])
def test_the_opt_in_sets_the_pad_for_the_whole_process(how):
    """``xgrad.keep_heap_top`` and ``XGRAD_HEAP_TOP_PAD`` really call
    mallopt: NumPy's own allocations then fault as the docstring warns."""
    if how == 'keep_heap_top':
        pad, faults = _probe('keep')
    else:
        pad, faults = _probe('xgrad', heap_top_pad=str(64 << 20))
    _, without = _probe('numpy')
    assert pad == 64 << 20
    if _same_faults(faults, without):
        pytest.skip('this C library served the arrays from its heap anyway (huge pages, '
                    'tuned malloc?): {} page faults a step, {} without'.format(faults, without))
    # 3 arrays a step of 1, 4 and 8 MiB, each a fresh mmap: 1,287 faults a step on
    # the 2-core VM (NumPy asks for huge pages for the larger two), 0 without.
    assert faults > without + 500


@pytest.mark.skipif(not ON_GLIBC, reason='M_TOP_PAD is glibc\'s')
def test_the_opt_in_saves_the_page_faults_of_each_step():
    """Also when set after the import: keep_heap_top grows the heap once, so
    the pad is there before the loop's first step."""
    unset, returned = _probe('xgrad', probe=STEP_PROBE)
    pad, kept = _probe('keep', probe=STEP_PROBE)
    assert (pad, unset) == (64 << 20, 0)
    if returned < 20 * 1000:  # 8 MiB a step is about 2,000 pages of 4 KiB
        pytest.skip('this C library kept the memory anyway (huge pages?): {} page faults '
                    'in 20 steps'.format(returned))
    assert kept < returned / 10, (kept, returned)


@pytest.mark.skipif(not ON_GLIBC, reason='M_TOP_PAD is glibc\'s')
def test_a_zero_pad_in_the_environment_sets_nothing():
    assert _probe('xgrad', heap_top_pad='0')[0] == 0


@pytest.mark.skipif(ON_GLIBC, reason='on glibc the pad is set')
def test_other_c_libraries_are_left_alone():
    assert xgrad.keep_heap_top(1 << 20) == 0


@pytest.mark.parametrize('heap_top_pad, says', [
    (None, 'C heap:         as the C library sets it'),
    (str(1 << 20), 'C heap:         M_TOP_PAD 1048576 bytes, set through xgrad')])
def test_info_says_whether_the_heap_was_tuned(heap_top_pad, says):
    if heap_top_pad is not None and not ON_GLIBC:
        pytest.skip('M_TOP_PAD is glibc\'s')
    env = {k: v for k, v in os.environ.items() if k != 'XGRAD_HEAP_TOP_PAD'}
    env['PYTHONPATH'] = os.pathsep.join(
        [PACKAGE_PARENT] + [p for p in [os.environ.get('PYTHONPATH')] if p])
    if heap_top_pad is not None:
        env['XGRAD_HEAP_TOP_PAD'] = heap_top_pad
    # (the report's exit status says whether CuPy works, which is not this test's business)
    out = subprocess.run([sys.executable, '-m', 'xgrad', 'info'], env=env, timeout=300,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    heap = [line for line in out.splitlines() if line.startswith('C heap:')]
    assert heap and heap[0].startswith(says), out
