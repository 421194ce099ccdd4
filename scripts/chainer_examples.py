#!/usr/bin/env python
"""Chainer 7.8.1's own examples, unmodified, with xgrad as ``chainerx``, on
synthetic data shaped like their datasets (nothing is downloaded).

    python scripts/chainer_examples.py CHAINER_TREE [--device native:0]
        [--only mnist,vae,...] [--json PATH]

Each example runs in its own process (``examples/<dir>/<script>.py`` via
runpy, with ``chainer.datasets.get_*`` returning the synthetic data) for a
few hundred iterations at most; a row reports its exit status, the first
and last loss of Chainer's LogReport, and the wall time. The
examples' plotting (matplotlib, PIL) is replaced by stand-ins that accept
every call when those packages are missing: the image extensions still pull
the arrays to the host as they would to plot them. Exit status 1 when an
example fails.
"""

import argparse
import json
import os
import runpy
import subprocess
import sys
import tempfile
import time

import numpy

# name: (script under examples/, its arguments, the loss its LogReport
# reports). Sizes keep each under a minute on two CPU cores.
EXAMPLES = {
    'mnist': ('mnist/train_mnist.py', ['--epoch', '2', '--unit', '200'], 'main/loss'),
    'vae': ('vae/train_vae.py', ['--epoch', '2', '--test'], 'main/loss'),
    'dcgan': ('dcgan/train_dcgan.py', ['--epoch', '1', '--display_interval', '5',
                                       '--snapshot_interval', '1000'], 'dis/loss'),
    'word2vec-skipgram-hsm': ('word2vec/train_word2vec.py', ['--epoch', '2'], 'main/loss'),
    'word2vec-skipgram-ns': ('word2vec/train_word2vec.py',
                             ['--epoch', '2', '--out-type', 'ns'], 'main/loss'),
    'word2vec-cbow-original': ('word2vec/train_word2vec.py',
                               ['--epoch', '2', '--model', 'cbow', '--out-type', 'original'],
                               'main/loss'),
    'cifar-vgg': ('cifar/train_cifar.py', ['--epoch', '2'], 'main/loss'),
}

SIZES = {'mnist': (2000, 500), 'cifar': (256, 128), 'words': 20000, 'vocabulary': 1000}


# ---------------------------------------------------------------------------
# Synthetic datasets, returned by the patched chainer.datasets.get_* functions

def _rng():
    return numpy.random.RandomState(0)


def synthetic_ptb_words():
    """(train, valid, test) word-id arrays like get_ptb_words(): a random
    Markov chain over the vocabulary (three successors per word), the train
    split starting with every word once so that max(train) + 1 is the
    vocabulary size, as in PTB."""
    rng = _rng()
    size = SIZES['vocabulary']
    successors = rng.randint(0, size, size=(size, 3))

    def words(n):
        out = numpy.empty(n, numpy.int32)
        out[0] = 0
        for i in range(1, n):
            out[i] = successors[out[i - 1], rng.randint(3)]
        return out
    n = SIZES['words']
    train = numpy.concatenate([numpy.arange(size, dtype=numpy.int32), words(n)])
    return train, words(n // 10), words(n // 10)


def synthetic_ptb_vocabulary():
    return {'w{}'.format(i): i for i in range(SIZES['vocabulary'])}


def _images(rng, n, shape, classes, scale):
    """n images of ``shape`` in [0, scale], each of one of ``classes`` fixed
    patterns plus noise, and their labels."""
    patterns = rng.uniform(size=(classes,) + shape) > 0.7
    labels = rng.randint(0, classes, size=n).astype(numpy.int32)
    images = 0.7 * patterns[labels] + 0.3 * rng.uniform(size=(n,) + shape)
    return (images * scale).astype(numpy.float32), labels


def _split(make, sizes, withlabel):
    import chainer
    out = []
    for n in sizes:
        x, t = make(n)
        out.append(chainer.datasets.TupleDataset(x, t) if withlabel else x)
    return tuple(out)


def synthetic_mnist(withlabel=True, ndim=1, scale=1.0, dtype=None, label_dtype=numpy.int32,
                    rgb_format=False):
    rng = _rng()
    shape = {1: (784,), 2: (28, 28), 3: (1, 28, 28)}[ndim]
    return _split(lambda n: _images(rng, n, shape, 10, scale), SIZES['mnist'], withlabel)


def synthetic_cifar(withlabel=True, ndim=3, scale=1.0, dtype=None):
    rng = _rng()
    shape = (3, 32, 32) if ndim == 3 else (3072,)
    return _split(lambda n: _images(rng, n, shape, 10, scale), SIZES['cifar'], withlabel)


def _plotting_stand_ins():
    """Stand-ins for matplotlib and PIL where they are not installed: every
    call is accepted; ``plt.subplots(r, c)`` gives a figure and an (r, c)
    array of axes, as the examples unpack it."""
    from unittest import mock
    for name in ('matplotlib', 'PIL'):
        try:
            __import__(name)
            continue
        except ImportError:
            pass
        module = mock.MagicMock()
        if name == 'matplotlib':
            def subplots(rows=1, cols=1, **kwargs):
                axes = numpy.empty((rows, cols), object)
                for index in numpy.ndindex(rows, cols):
                    axes[index] = mock.MagicMock()
                return mock.MagicMock(), axes
            module.pyplot.subplots = subplots
            sys.modules['matplotlib.pyplot'] = module.pyplot
        else:
            sys.modules['PIL.Image'] = module.Image
        sys.modules[name] = module


# ---------------------------------------------------------------------------
# One example (the child process)

def run_child(tree, name, device, out):
    from xgrad import chainerx_compat
    chainerx_compat.install()
    import chainer
    import chainer.training.extensions as extensions
    _plotting_stand_ins()
    chainer.datasets.get_ptb_words = synthetic_ptb_words
    chainer.datasets.get_ptb_words_vocabulary = synthetic_ptb_vocabulary
    chainer.datasets.get_mnist = synthetic_mnist
    chainer.datasets.get_cifar10 = synthetic_cifar
    extensions.ProgressBar = lambda *a, **k: (lambda trainer: None)  # quiet logs
    script, args, _ = EXAMPLES[name]
    path = os.path.join(tree, 'examples', script)
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path, '--device', device, '--out', out] + args
    runpy.run_path(path, run_name='__main__')


# ---------------------------------------------------------------------------
# The table (the parent process)

def _losses(out, key):
    """First and last loss ``key`` of Chainer's LogReport in ``out``."""
    try:
        with open(os.path.join(out, 'log')) as f:
            log = json.load(f)
    except (OSError, ValueError):
        return None, None
    losses = [entry[key] for entry in log if key in entry]
    return (losses[0], losses[-1]) if losses else (None, None)


def run_example(tree, name, device):
    with tempfile.TemporaryDirectory(prefix='xgrad-example-') as out:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), tree, '--child', name,
             '--device', device, '--out', out],
            cwd=out, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        script, example_args, key = EXAMPLES[name]
        first, last = _losses(out, key)
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
    return {'example': name, 'script': script, 'args': example_args,
            'device': device, 'exit': proc.returncode, 'seconds': round(seconds, 1),
            'loss': key, 'first_loss': first, 'last_loss': last,
            'output_tail': tail if proc.returncode else []}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('chainer_tree')
    parser.add_argument('--device', default='native:0',
                        help='comma-separated devices, each runs every example '
                             '(e.g. native:0,@numpy: xgrad and Chainer\'s NumPy)')
    parser.add_argument('--only', help='comma-separated names: ' + ', '.join(EXAMPLES))
    parser.add_argument('--json', help='write the rows here')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_child(args.chainer_tree, args.child, args.device, args.out)
    names = args.only.split(',') if args.only else list(EXAMPLES)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        parser.error('unknown example(s) {}; known: {}'.format(unknown, ', '.join(EXAMPLES)))
    rows = []
    print('{:<24} {:<10} {:>4} {:>8} {:>12} {:>12}'.format(
        'example', 'device', 'exit', 'seconds', 'first loss', 'last loss'))
    for name in names:
        for device in args.device.split(','):
            row = run_example(args.chainer_tree, name, device)
            rows.append(row)
            print('{:<24} {:<10} {:>4} {:>8} {:>12} {:>12}'.format(
                name, device, row['exit'], row['seconds'], _number(row['first_loss']),
                _number(row['last_loss'])), flush=True)
            for line in row['output_tail']:
                print('    ' + line)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    return 1 if any(r['exit'] for r in rows) else 0


def _number(v):
    return '-' if v is None else '{:.5g}'.format(v)


if __name__ == '__main__':
    sys.exit(main())
