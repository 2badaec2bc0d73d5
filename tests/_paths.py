"""Where the tests find the real MNIST files (they never download): $GPULAB_DATA_DIR when it holds
them, else the workspace's shared folder next to the repository."""

import os
from pathlib import Path

_CANDIDATES = [Path(os.environ["GPULAB_DATA_DIR"])] if os.environ.get("GPULAB_DATA_DIR") else []
_CANDIDATES.append(Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist")
SHARED_MNIST = next((p for p in _CANDIDATES if (p / "t10k-images-idx3-ubyte.gz").exists()), _CANDIDATES[-1])
