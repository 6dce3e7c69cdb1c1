"""Build hook for the optional compiled fast paths (everything else is in pyproject.toml)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # Optional: without a C compiler, stepscope falls back to its pure-Python capture path.
        Extension("stepscope.capture._fastpath", ["src/stepscope/capture/_fastpath.c",
                                                  "src/stepscope/capture/records.c"],
                  depends=["src/stepscope/capture/records.h"], optional=True),
        # The Python tracer's profile hook in C; python_tracer.py has the pure-Python twin.
        Extension("stepscope.capture._pyhook", ["src/stepscope/capture/_pyhook.c"],
                  depends=["src/stepscope/capture/records.h"], optional=True),
        # XSpace bytes straight into columns; formats/xspace_columns.py has the protobuf twin.
        Extension("stepscope.formats._xspace_decode", ["src/stepscope/formats/_xspace_decode.c"],
                  optional=True),
        # Columns straight into XEvent bytes; formats/xplane_encoder.py has the NumPy twin.
        Extension("stepscope.formats._xplane_encode", ["src/stepscope/formats/_xplane_encode.c"],
                  optional=True),
    ],
)
