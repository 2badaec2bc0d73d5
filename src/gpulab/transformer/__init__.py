"""Transformers on the GPU (lesson 12 and lab12). Import the submodules: attention, flash, backward, formats, llm."""

__all__: list[str] = []
