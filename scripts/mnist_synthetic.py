#!/usr/bin/env python
"""Chainer's MNIST example (examples/mnist/train_mnist.py, unmodified) on
synthetic MNIST-shaped data, with xgrad as ``chainerx``.

    python scripts/mnist_synthetic.py CHAINER_TREE --device native:0 --epoch 3 --unit 1000
        [--timer-hook]

The data: 28x28 float32 images in [0, 1] of ten classes, each class a fixed
random stroke pattern with per-sample noise and shifts, so a model must
learn (a linear model does not get 100%). Sizes as MNIST's unless
``--train-size``/``--test-size``. Prints the example's log and, at the end,
the final validation accuracy and seconds per training iteration. With
``--timer-hook`` the whole run is inside an ``xgrad.hooks.TimerHook`` (the
example itself is unchanged) and its per-op table is printed at the end.
"""

import argparse
import json
import os
import runpy
import sys
import time

import numpy


def synthetic_mnist(train_size, test_size, seed=0):
    """(train, test) TupleDatasets shaped like chainer.datasets.get_mnist()'s."""
    import chainer
    rng = numpy.random.RandomState(seed)
    patterns = (rng.uniform(size=(10, 28, 28)) > 0.8).astype(numpy.float32)

    def make(n):
        labels = rng.randint(0, 10, size=n).astype(numpy.int32)
        images = patterns[labels]
        shifts = rng.randint(-2, 3, size=(n, 2))
        images = numpy.stack([numpy.roll(im, tuple(s), axis=(0, 1))
                              for im, s in zip(images, shifts)])
        images = images * rng.uniform(0.5, 1.0, size=(n, 1, 1)) + \
            rng.uniform(0.0, 0.6, size=images.shape)
        images = numpy.clip(images, 0.0, 1.0).astype(numpy.float32).reshape(n, 784)
        return chainer.datasets.TupleDataset(images, labels)
    return make(train_size), make(test_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('chainer_tree')
    parser.add_argument('--train-size', type=int, default=60000)
    parser.add_argument('--test-size', type=int, default=10000)
    parser.add_argument('--timer-hook', action='store_true',
                        help="time every xgrad op with xgrad.hooks.TimerHook and print its table")
    args, example_args = parser.parse_known_args()

    from chainer_examples import _plotting_stand_ins  # beside this script
    _plotting_stand_ins()   # train_mnist.py imports matplotlib
    from xgrad import chainerx_compat
    chainerx_compat.install()
    import chainer
    import chainer.training.extensions as extensions
    train, test = synthetic_mnist(args.train_size, args.test_size)
    chainer.datasets.get_mnist = lambda *a, **k: (train, test)
    extensions.ProgressBar = lambda *a, **k: (lambda trainer: None)  # quiet logs

    script = os.path.join(args.chainer_tree, 'examples', 'mnist', 'train_mnist.py')
    out = '/tmp/xgrad-mnist-{}'.format(os.getpid())
    sys.argv = [script, '--out', out] + example_args
    import contextlib
    import xgrad
    hook = xgrad.hooks.TimerHook() if args.timer_hook else contextlib.nullcontext()
    start = time.perf_counter()
    with hook:
        runpy.run_path(script, run_name='__main__')
    elapsed = time.perf_counter() - start
    with open(os.path.join(out, 'log')) as f:
        log = json.load(f)
    last = log[-1]
    print('RESULT device={} validation/main/accuracy={:.4f} main/accuracy={:.4f} '
          'iterations={} seconds/iteration={:.4f}'.format(
              next((a.split('=')[-1] for a in example_args if a.startswith('--device')), '?')
              if not any(a == '--device' for a in example_args)
              else example_args[example_args.index('--device') + 1],
              last['validation/main/accuracy'], last['main/accuracy'], last['iteration'],
              elapsed / last['iteration']))
    if args.timer_hook:
        print('TimerHook: {:.2f} s in xgrad ops of {:.2f} s'.format(hook.total_time(), elapsed))
        hook.print_report(unit='auto_foreach')


if __name__ == '__main__':
    main()
