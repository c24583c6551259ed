"""The optional C extensions (`kinference.native`); every other setting is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found the build skips the
extension with a warning and the install still succeeds; the pure-Python twins then serve
(the same answers, more CPU). Build in place for a checkout: `python setup.py build_ext
--inplace`. `_prefix` is several units sharing one internal header (`prefix.h`, listed in
`depends` so an edit to it rebuilds the extension); so is `_ttft` (`ttft.h`, `ttft_args.h`).
"""

from setuptools import Extension, setup

NATIVE = "kinference/native"
PREFIX_UNITS = ("_prefix", "prefix_map", "prefix_slots", "prefix_holders", "prefix_keys")
PREFIX_UNITS += ("prefix_methods",)
TTFT_UNITS = ("_ttft", "ttft_args", "ttft_rows")

setup(
    ext_modules=[
        Extension(
            "kinference.native._chain",
            [f"{NATIVE}/_chain.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "kinference.native._prefix",
            [f"{NATIVE}/{unit}.c" for unit in PREFIX_UNITS],
            depends=[f"{NATIVE}/prefix.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "kinference.native._scan",
            [f"{NATIVE}/_scan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "kinference.native._ttft",
            [f"{NATIVE}/{unit}.c" for unit in TTFT_UNITS],
            depends=[f"{NATIVE}/ttft.h", f"{NATIVE}/ttft_args.h"],
            optional=True,
            # The pure form's values bit for bit: no fused multiply-add (aarch64 would
            # contract `a * b + c` by default); pow from libm as CPython's float ** 2.
            extra_compile_args=["-O2", "-ffp-contract=off"],
            libraries=["m"],
        ),
    ]
)
