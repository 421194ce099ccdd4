"""``python -m xgrad check ...``: see ``xgrad/testing/_cli.py``;
``python -m xgrad info``: see ``xgrad/_info.py``;
``python -m xgrad dtypes``: print docs/dtype_promotion.md."""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ('-h', '--help'):
        print('usage: python -m xgrad check [options]   (python -m xgrad check --help)\n'
              '       python -m xgrad check --ops PKG   (your own ops: docs/user_ops.md)\n'
              '       python -m xgrad info              (versions, GPUs, kernels)\n'
              '       python -m xgrad dtypes            (the dtype promotion table)')
        return 0 if argv else 2
    if argv[0] == 'dtypes':
        from xgrad._dtype_docs import markdown_table
        sys.stdout.write(markdown_table())
        return 0
    if argv[0] == 'info':
        from xgrad._info import main as info
        return info(argv[1:])
    if argv[0] != 'check':
        print('python -m xgrad: unknown command {!r}; the commands are: check, info, dtypes'
              .format(argv[0]), file=sys.stderr)
        return 2
    from xgrad.testing._cli import main as check
    return check(argv[1:])


if __name__ == '__main__':
    sys.exit(main())
