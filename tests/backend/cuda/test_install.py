"""What ``pip install "xgrad[cuda]"`` brings, and ``python -m xgrad info``."""

import importlib.metadata
import io
import os
import subprocess
import sys

import pytest

from xgrad import _info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _extra(name):
    import tomllib
    with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
        return tomllib.load(f)['project']['optional-dependencies'][name]


def test_the_cuda_extra_brings_cupy_with_the_cuda_toolkit_parts():
    (cupy,) = [r for r in _extra('cuda') if r.startswith('cupy-cuda12x')]
    assert cupy.startswith('cupy-cuda12x[ctk]')


def test_cupys_ctk_extra_has_nvrtc_cublas_and_the_runtime():
    try:
        requires = importlib.metadata.requires('cupy-cuda12x') or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip('cupy-cuda12x is not installed')
    ctk = [r for r in requires if 'extra == "ctk"' in r]
    assert ctk, requires
    for part in ('nvrtc', 'cublas', 'cudart', 'curand', 'cusolver'):
        assert part in ctk[0], ctk


def test_info_lists_versions_devices_and_kernels(fake, monkeypatch):
    class FakeNvrtc:
        compiled = []

        def createProgram(self, source, name, headers, includes):
            return name

        def addNameExpression(self, prog, expr):
            pass

        def compileProgram(self, prog, options):
            self.compiled.append((prog, tuple(options)))

        def destroyProgram(self, prog):
            pass

        def getVersion(self):
            return (12, 9)

    nvrtc = FakeNvrtc()
    monkeypatch.setattr(_info, '_cupy', lambda: (fake, None))
    monkeypatch.setattr(_info, '_nvrtc_module', lambda cp: nvrtc)
    out = io.StringIO()
    assert _info.report(out) == 0
    text = out.getvalue()
    for expected in ('xgrad:', 'NumPy:', 'CuPy:', 'CUDA runtime:   12.9', 'NVRTC:          12.9',
                     'cuda:0:', 'cuda:1:', 'compute capability 9.0',
                     'reduce.cu compiles for compute_90'):
        assert expected in text, text
    assert all('-ftz=true' in options for _, options in nvrtc.compiled)


def test_info_without_cupy_says_so_and_succeeds(monkeypatch):
    monkeypatch.setattr(_info, '_cupy', lambda: (None, 'not installed (pip install ...)'))
    out = io.StringIO()
    assert _info.report(out) == 0
    assert 'CuPy:           not installed' in out.getvalue()


def test_python_m_xgrad_info_runs():
    out = subprocess.run([sys.executable, '-m', 'xgrad', 'info'], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr
    assert 'xgrad:' in out.stdout and 'NumPy:' in out.stdout
    if 'CuPy:' in out.stdout and 'compiles' in out.stdout:
        assert 'FAILS' not in out.stdout, out.stdout


def test_the_cuda_extra_brings_cudnn_9_for_cuda_12_on_linux():
    (cudnn,) = [r for r in _extra('cuda') if r.startswith('nvidia-cudnn')]
    assert cudnn.startswith('nvidia-cudnn-cu12>=9') and "platform_system == 'Linux'" in cudnn
