from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

# No [project] table in pyproject.toml: the name and version are setup()'s, as in many graph op libraries.
setup(
    name="segops",
    version="0.1.0",
    description="Segment sums registered with torch::RegisterOperators (a kiln adoption fixture)",
    packages=["segops"],
    ext_modules=[CppExtension("segops._segment", ["csrc/segment.cpp"])],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
