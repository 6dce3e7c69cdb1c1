"""Build hook for the optional compiled fast path (everything else is in pyproject.toml)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # Optional: without a C compiler, stepscope falls back to its pure-Python capture path.
        Extension("stepscope.capture._fastpath", ["src/stepscope/capture/_fastpath.c"],
                  optional=True),
    ],
)
