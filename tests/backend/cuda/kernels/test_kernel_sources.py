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


# The elementwise kernels' 16-byte packs, seen in the PTX: (kernel, functor,
# operands the functor reads, of which read-only, arrays written). Each must
# have a 128-bit global load (from the read-only path, ld.global.nc, where the
# kernel never writes the operand: const __restrict__), each array written a
# 128-bit store. (At least: NVRTC may version a loop, e.g. on a null operand.
# Tanh's backward reads gy and y, not x.)
PACKED_KERNELS = [
    ('unary_forward', 'xgrad::Tanh', 1, 1, 1),
    ('unary_backward', 'xgrad::Tanh', 2, 2, 1),
    ('unary_backward', 'xgrad::Log', 2, 2, 1),
    ('binary_forward', 'xgrad::Multiply', 2, 2, 1),
    ('binary_backward', 'xgrad::Divide', 3, 3, 2),
    ('accumulate', None, 2, 1, 1),
    ('add3', None, 2, 2, 1),
]
_VECTOR_ACCESS = re.compile(
    r'^\s*(ld|st)\.global(\.nc)?\.v(2|4)\.(?:b|u|s|f)(16|32|64)\s', re.M)


def _entry_body(ptx, lowered):
    start = ptx.index('.entry {}('.format(lowered))
    return ptx[start:ptx.index('\n}\n', start)]


def _vector_accesses(body):
    """(128-bit loads, of which ld.global.nc, 128-bit stores) of one entry."""
    loads = nc = stores = 0
    for op, non_coherent, lanes, bits in _VECTOR_ACCESS.findall(body):
        if int(lanes) * int(bits) != 128:
            continue
        if op == 'st':
            stores += 1
        else:
            loads += 1
            nc += bool(non_coherent)
    return loads, nc, stores


@pytest.fixture(scope='module')
def packed_ptx():
    """arch -> {name expression: the PTX of its entry}, NVRTC as CuPy calls
    it, only the kernels PACKED_KERNELS names (fast)."""
    nvrtc, why = _nvrtc()
    if nvrtc is None:
        pytest.skip('NVRTC through CuPy is not available ({})'.format(why))
    exprs = sorted({loader.template(k, t, *([f] if f else []))
                    for k, f, _, _, _ in PACKED_KERNELS for t in loader.STORAGE_TYPES})
    out = {}
    for arch in ('compute_80', 'compute_90'):
        prog = nvrtc.createProgram(loader.source('elementwise.cu'), 'elementwise.cu', [], [])
        try:
            for e in exprs:
                nvrtc.addNameExpression(prog, e)
            try:
                nvrtc.compileProgram(prog, list(loader.OPTIONS) + ['-arch=' + arch])
            except Exception:  # NOQA: the log says why
                pytest.fail(nvrtc.getProgramLog(prog))
            ptx = nvrtc.getPTX(prog)
            ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
            out[arch] = {e: _entry_body(ptx, nvrtc.getLoweredName(prog, e)) for e in exprs}
        finally:
            nvrtc.destroyProgram(prog)
    return out


@pytest.mark.parametrize('arch', ['compute_80', 'compute_90'])
@pytest.mark.parametrize('storage', loader.STORAGE_TYPES)
@pytest.mark.parametrize('kernel,functor,reads,read_only,writes', PACKED_KERNELS)
def test_elementwise_kernels_move_16_byte_packs(packed_ptx, arch, storage, kernel, functor,
                                                reads, read_only, writes):
    expr = loader.template(kernel, storage, *([functor] if functor else []))
    loads, nc, stores = _vector_accesses(packed_ptx[arch][expr])
    assert nc >= read_only and stores >= writes, (expr, loads, nc, stores)
    # accumulate's acc, read and written: a coherent load; all others .nc
    assert (loads - nc >= 1) == (reads > read_only), (expr, loads, nc, stores)


def test_the_vector_access_pattern_reads_ptx_as_nvrtc_writes_it():
    body = ('\tld.global.nc.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd1];\n'
            '\tld.global.v2.f64 \t{%fd1, %fd2}, [%rd2];\n'
            '\tld.global.nc.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd3];\n'
            '\tld.global.v2.f32 \t{%f5, %f6}, [%rd4];\n'       # 64 bits: not a pack
            '\tld.global.nc.f32 \t%f7, [%rd5];\n'
            '\tst.global.v4.f32 \t[%rd6], {%f1, %f2, %f3, %f4};\n')
    assert _vector_accesses(body) == (3, 2, 1)
