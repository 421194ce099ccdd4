"""What the sdist carries and what the extras install (docs/install.md).

MANIFEST.in is applied here with setuptools' own template processor to the
files of the tree, without building (offline, a second); the sdist built by
``python -m build --sdist`` holds the same list."""

import functools
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip('tomllib')


@functools.lru_cache()
def sdist_files():
    from setuptools._distutils.filelist import FileList
    cwd = os.getcwd()
    os.chdir(ROOT)  # MANIFEST.in's patterns are relative to the project root
    try:
        files = FileList()
        files.findall()
        for line in (ROOT / 'MANIFEST.in').read_text().splitlines():
            line = line.split('#')[0].strip()
            if line:
                files.process_template_line(line)
    finally:
        os.chdir(cwd)
    return frozenset(str(pathlib.PurePath(f)) for f in files.files)


def source_files(top):
    """The files of a source folder, without caches and build products."""
    return {str(p.relative_to(ROOT)) for p in (ROOT / top).rglob('*')
            if p.is_file() and '__pycache__' not in p.parts
            and p.suffix not in ('.pyc', '.so', '.o')
            and not (top == 'xgrad' and p.suffix in ('.c', '.cpp'))}


@pytest.mark.parametrize('top', ['tests', 'docs', 'bench', 'examples', 'tools', 'scripts',
                                 'xgrad'])
def test_sdist_carries_every_file_of(top):
    missing = source_files(top) - sdist_files()
    assert not missing, 'MANIFEST.in leaves out {}'.format(sorted(missing))


def test_sdist_leaves_out_build_products():
    built = [f for f in sdist_files() if re.search(r'\.(so|o|pyc)$', f)
             or (f.startswith('xgrad/') and re.search(r'\.(c|cpp)$', f))]
    assert not built


def pyproject():
    return tomllib.loads((ROOT / 'pyproject.toml').read_text())


def test_test_extra_is_light_and_kernels_extra_has_cupy_and_nvrtc():
    extras = pyproject()['project']['optional-dependencies']
    assert not any(re.match(r'(cupy|nvidia)', d) for d in extras['test']), extras['test']
    names = {re.match(r'[\w-]+', d).group(0) for d in extras['kernels']}
    assert names == {'cupy-cuda12x', 'nvidia-cuda-nvrtc-cu12'}
    assert all("platform_machine == 'x86_64'" in d for d in extras['kernels'])
    ci = (ROOT / '.ci' / 'run').read_text()
    assert re.search(r'pip install .*-e "\.\[test,kernels,mpi\]"', ci)


def test_license_is_an_spdx_expression():
    project = pyproject()
    assert project['project']['license'] == 'MIT'
    assert project['project']['license-files'] == ['LICENSE']
    requires = project['build-system']['requires']
    assert any(re.fullmatch(r'setuptools>=(\d+)', r) and
               int(re.fullmatch(r'setuptools>=(\d+)', r).group(1)) >= 77 for r in requires)
