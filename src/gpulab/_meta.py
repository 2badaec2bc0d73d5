"""Project facts set in one place (the Colab badges and install cells are generated from these)."""

REPO = "gpulab-course/gpulab"  # GitHub owner/name
BRANCH = "main"
REPO_URL = f"https://github.com/{REPO}"
