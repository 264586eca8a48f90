"""The version of envrec, in a leaf module so that any module can name it without importing the package."""

__version__ = "0.1.0"
