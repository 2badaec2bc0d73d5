"""Project facts set in one place (the Colab badges and install cells are generated from these).

``VERSION`` is the one version source: pyproject.toml reads it (``[tool.setuptools.dynamic]``) and
``gpulab.__version__`` re-exports it. This module imports nothing.
"""

VERSION = "0.1.0"

REPO = "gpulab-course/gpulab"  # GitHub owner/name
BRANCH = "main"
REPO_URL = f"https://github.com/{REPO}"
