"""kiln: build, repair, audit, index and reproduce PyTorch operator wheels of any op library (torch-kiln).

Importable without torch and without a built extension.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
