"""fastload's compiled parts: the region decoder (fastload/backends/jpegregion.c, with
restarts.c, the lossless rewrite that gives JPEGs restart markers) and the normalize kernel of
float32 batches (fastload/gpu/normalizing.c).

Everything else is in pyproject.toml. Both extensions are optional: without a C compiler or
libjpeg-turbo's headers the build says why and fastload installs without them; ``fastload info``
then says why the ``region`` backend is unusable and how to get it, and float32 batches are
normalized by OpenCV (the same values, at about twice the cost).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FLAGS = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"]


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
            depends=["fastload/backends/restarts.h"],
            libraries=["jpeg"],
            extra_compile_args=FLAGS,
        ),
        Extension(
            "fastload.gpu._normalizing", ["fastload/gpu/normalizing.c"], extra_compile_args=FLAGS
        ),
    ],
    cmdclass={"build_ext": BuildWhatCanBeBuilt},
)
