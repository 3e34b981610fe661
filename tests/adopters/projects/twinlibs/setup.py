from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

# Two libraries, each a fragment of the twinlibs op namespace, loaded by twinlibs/__init__.py with
# torch.ops.load_library (no Python module init in either).
setup(
    ext_modules=[
        CppExtension("twinlibs._axpy", ["csrc/axpy.cpp"]),
        CppExtension("twinlibs._prefix_sum", ["csrc/prefix_sum.cpp"]),
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
