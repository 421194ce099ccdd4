"""The kernel sources compile for the device, and the tables agree.

nvcc -ptx compiles each source with every name expression instantiated (for
sm_80 and sm_90) and the PTX must have exactly one ``.entry`` per name
expression. The compiles of a session run in parallel, once each.
"""

import re
import shutil
import subprocess
import sys
from importlib import resources

import pytest

from xgrad import _kernels
from xgrad._kernels import loader

ARCHS = ('sm_80', 'sm_90')
NVCC = shutil.which('nvcc')
CXXFILT = shutil.which('c++filt')

needs_nvcc = pytest.mark.skipif(NVCC is None, reason='nvcc is not on PATH')


@pytest.fixture(scope='module')
def ptx(tmp_path_factory):
    """(source, arch) -> (returncode, output, PTX text); all compiles at once."""
    tmp = tmp_path_factory.mktemp('ptx')
    jobs = {}
    for name in loader.SOURCES:
        cu = tmp / name
        cu.write_text(loader.instantiation_source(name))
        for arch in ARCHS:
            out = tmp / '{}.{}.ptx'.format(name, arch)
            cmd = [NVCC, *loader.OPTIONS, '-ptx', '-arch=' + arch, str(cu), '-o', str(out)]
            jobs[name, arch] = (out, subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = {}
    for key, (out, proc) in jobs.items():
        log, _ = proc.communicate(timeout=300)
        text = out.read_text() if proc.returncode == 0 else ''
        results[key] = (proc.returncode, log, text)
    return results


def _demangled_kernels(mangled):
    """'xgrad::f<float, xgrad::Tanh>' for each mangled entry name."""
    out = subprocess.run([CXXFILT], input='\n'.join(mangled), capture_output=True,
                         text=True, check=True).stdout.split('\n')
    names = []
    for line in out[:len(mangled)]:
        line = line.strip()
        if line.startswith('void '):
            line = line[len('void '):]
        depth = 0
        for i, ch in enumerate(line):     # cut the parameter list
            depth += ch == '<'
            depth -= ch == '>'
            if ch == '(' and depth == 0:
                line = line[:i]
                break
        names.append(line)
    return names


@needs_nvcc
@pytest.mark.parametrize('arch', ARCHS)
@pytest.mark.parametrize('name', loader.SOURCES)
def test_source_compiles_to_ptx_with_an_entry_per_name_expression(ptx, name, arch):
    rc, log, text = ptx[name, arch]
    assert rc == 0, log
    assert 'warning' not in log.lower(), log
    entries = re.findall(r'\.entry\s+([A-Za-z_$][\w$]*)', text)
    expected = loader.name_expressions(name)
    assert len(entries) == len(set(entries)) == len(expected)
    if CXXFILT:
        assert sorted(_demangled_kernels(entries)) == sorted(expected)


@needs_nvcc
@pytest.mark.parametrize('name', loader.SOURCES)
def test_ptx_uses_no_atomics_or_warp_shuffles(ptx, name):
    """What the emulator could not run exactly."""
    rc, log, text = ptx[name, 'sm_80']
    assert rc == 0, log
    assert not re.search(r'^\s*(atom|red|shfl|vote)\.', text, re.M)


@pytest.mark.parametrize('name', loader.SOURCES + (loader.COMMON,))
def test_sources_include_nothing(name):
    text = (resources.files('xgrad._kernels') / name).read_text()
    assert not re.search(r'^\s*#\s*include', text, re.M)


def test_block_size_matches_common_cuh():
    text = loader.source('reduce.cu')
    m = re.search(r'#define XGRAD_BLOCK (\d+)', text)
    assert m and int(m.group(1)) == loader.XGRAD_BLOCK == _kernels.XGRAD_BLOCK


def test_name_expressions_are_unique_and_cover_the_tables():
    exprs = loader.name_expressions('elementwise.cu')
    per_type = 2 * len(loader.UNARY) + 2 * len(loader.BINARY) + 2
    assert len(exprs) == len(set(exprs)) == 3 * per_type
    assert 'xgrad::unary_backward<xgrad::half, xgrad::Log1p>' in exprs
    assert 'xgrad::binary_backward<double, xgrad::Maximum>' in exprs
    assert len(loader.name_expressions('reduce.cu')) == 3 * 5
    sm = loader.name_expressions('softmax.cu')
    assert 'xgrad::softmax_cross_entropy_backward<float, long long>' in sm and len(sm) == 24


def test_backward_read_tables_match_the_op_lists():
    assert tuple(_kernels.UNARY_BACKWARD_READS) == loader.UNARY
    assert set(_kernels.UNARY_BACKWARD_READS.values()) == {None, 'x', 'y'}
    assert tuple(_kernels.BINARY_BACKWARD_READS) == loader.BINARY


def test_source_is_common_cuh_then_the_file():
    text = loader.source('softmax.cu')
    assert text.index('struct half') < text.index('softmax_forward')
    assert loader.digest('softmax.cu') == loader.digest('softmax.cu')
    assert loader.digest('softmax.cu') != loader.digest('reduce.cu')
    with pytest.raises(ValueError):
        loader.source('nope.cu')


def test_importing_the_wrappers_does_not_import_cupy():
    code = ('import sys, xgrad._kernels, xgrad._kernels.loader; '
            'sys.exit("cupy" in sys.modules)')
    assert subprocess.run([sys.executable, '-c', code]).returncode == 0


def _nvrtc():
    """CuPy's NVRTC bindings, when CuPy and an NVRTC library are installed
    (no GPU needed: compiling for a virtual architecture touches no device)."""
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as e:  # NOQA: ImportError, or the library is missing
        return None, '{}: {}'.format(type(e).__name__, e)
    return nvrtc, None


@pytest.mark.parametrize('arch', ['compute_80', 'compute_90'])
@pytest.mark.parametrize('name', loader.SOURCES)
def test_source_compiles_with_nvrtc_as_cupy_loads_it(name, arch):
    """What RawModule does at run time: the same text, options and name
    expressions through NVRTC; every expression resolves to a kernel."""
    nvrtc, why = _nvrtc()
    if nvrtc is None:
        pytest.skip('NVRTC through CuPy is not available ({})'.format(why))
    prog = nvrtc.createProgram(loader.source(name), name, [], [])
    try:
        for expr in loader.name_expressions(name):
            nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, list(loader.OPTIONS) + ['-arch=' + arch])
        except Exception:  # NOQA: the log says why
            pytest.fail(nvrtc.getProgramLog(prog))
        lowered = [nvrtc.getLoweredName(prog, e) for e in loader.name_expressions(name)]
        assert len(set(lowered)) == len(lowered)
        assert all(low.startswith('_Z') for low in lowered)
        ptx = nvrtc.getPTX(prog)
        text = ptx.decode() if isinstance(ptx, bytes) else ptx
        assert text.count('.entry') == len(lowered)
    finally:
        nvrtc.destroyProgram(prog)
