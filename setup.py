"""The one compiled part of fastload: the region decoder (fastload/backends/jpegregion.c).

Everything else is in pyproject.toml. The extension is optional: without a C compiler or
libjpeg-turbo's headers, setuptools warns and fastload installs without it; ``fastload info``
then says why the ``region`` backend is unusable and how to get it.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "fastload.backends._jpegregion",
            ["fastload/backends/jpegregion.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
