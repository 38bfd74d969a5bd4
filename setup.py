"""fastload's compiled parts: the region decoder (fastload/backends/jpegregion.c, with
restarts.c, the lossless rewrite that gives JPEGs restart markers), the normalize kernel of
float32 batches (fastload/gpu/normalizing.c), the resize kernel (fastload/pixels/resizing.c) and the
file reader (fastload/backends/files.c).

Everything else is in pyproject.toml. Each extension is optional: without a C compiler or
libjpeg-turbo's headers the build says why and fastload installs without them; ``fastload info``
then says why the ``region`` backend is unusable and how to get it, float32 batches are
normalized by OpenCV (the same values, at about twice the cost), images are resized by torch
(the same pixels, the GIL handed over three times a sample), and files are read by ``os`` (the
same bytes, the GIL handed over four times a file).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FLAGS = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"]
# the resize kernel (fastload/pixels/resizing.h) runs its four rows' and four lanes' loops unrolled
# only at -O3: about 1.3x its speed at -O2
RESIZING = [*FLAGS, "-O3"]


class BuildWhatCanBeBuilt(build_ext):
    """Leave out an extension that fails to build, instead of failing the install.

    ``Extension(optional=True)`` alone is not enough: setuptools still lists the missing
    library among the outputs, and an editable install then fails copying it.
    """

    def build_extensions(self) -> None:
        built = []
        for extension in self.extensions:
            try:
                self.build_extension(extension)
            except Exception as exc:  # the compiler's and the linker's errors, whatever their class
                print(
                    f"warning: {extension.name} not built ({exc}); fastload installs without "
                    "it: 'fastload info' says what is missing"
                )
            else:
                built.append(extension)
        self.extensions = built


setup(
    ext_modules=[
        Extension(
            "fastload.backends._jpegregion",
            ["fastload/backends/jpegregion.c", "fastload/backends/restarts.c"],
            depends=[
                "fastload/backends/restarts.h",
                "fastload/backends/cropplans.h",
                "fastload/pixels/resizing.h",
                "fastload/pixels/floats.h",
            ],
            libraries=["jpeg"],
            # the crop plans round as Python does: no multiply-add fused (cropplans.h)
            extra_compile_args=[*RESIZING, "-ffp-contract=off"],
        ),
        Extension(
            "fastload.gpu._normalizing",
            ["fastload/gpu/normalizing.c"],
            depends=["fastload/pixels/floats.h"],
            # the same floats as the resize writes (floats.h): no multiply-add fused
            extra_compile_args=[*FLAGS, "-ffp-contract=off"],
        ),
        Extension(
            "fastload.backends._files", ["fastload/backends/files.c"], extra_compile_args=FLAGS
        ),
        Extension(
            "fastload.pixels._resizing",
            ["fastload/pixels/resizing.c"],
            depends=["fastload/pixels/resizing.h", "fastload/pixels/floats.h"],
            extra_compile_args=RESIZING,
        ),
    ],
    cmdclass={"build_ext": BuildWhatCanBeBuilt},
)
