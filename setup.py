"""The optional C extensions (`kinference.native`); every other setting is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found the build skips the
extension with a warning and the install still succeeds; the pure-Python twins then serve
(the same answers, more CPU). Build in place for a checkout: `python setup.py build_ext
--inplace`.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"kinference.native.{name}",
            [f"kinference/native/{name}.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
        for name in ("_chain", "_prefix")
    ]
)
