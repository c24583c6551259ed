"""The optional C extensions (`kinference.native`); everything else is in pyproject.toml.

`optional=True`: where no compiler is found the build goes on without them and the Python
twins serve (the same answers, slower). Build in place for a checkout:
`python setup.py build_ext --inplace`.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kinference.native._prefix",
            ["kinference/native/_prefix.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
