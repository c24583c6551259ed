"""The optional C extensions (kinference/native); every other setting is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found the build skips the
extension with a warning and the install still succeeds; the pure-Python forms then run.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kinference.native._chain",
            ["kinference/native/_chain.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
