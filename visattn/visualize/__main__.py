"""``python -m visattn.visualize --ckpt PATH --out DIR``: attention pictures of a checkpoint's
validation images (:func:`visattn.visualize.command.visualize`)."""

import sys

from .command import main

if __name__ == "__main__":
    sys.exit(main())
