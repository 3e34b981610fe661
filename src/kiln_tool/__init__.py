"""kiln: the opkiln maintainer tool (matrix, build, audit, index, repro).

Importable without torch and without a built extension.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
