"""`python -m inference.kernels`: build the library if needed (make install runs it) and print one
line: the ISA in use and the library, or why it is not built. Exits 0 either way: the engine falls
back to float weights, with the same reason, when the kernels are missing."""

from __future__ import annotations

import sys

from inference.kernels import ops
from inference.kernels.build import BuildError, build


def main() -> int:
    verbose = "-v" in sys.argv[1:]
    try:
        path = build(verbose=verbose)
    except (BuildError, OSError, ImportError) as exc:
        print(f"ragk kernels: not built: {exc}")
        return 0
    if ops.available():
        print(f"ragk kernels: isa={ops.isa()} (supported: {','.join(ops.supported_isas())}) library={path}")
    else:
        print(f"ragk kernels: built {path} but it does not load: {ops.load_error()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
