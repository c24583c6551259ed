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
TTFT_UNITS = ("_ttft", "ttft_args", "ttft_rows", "ttft_signals")


def _native(
    name: str,
    units: tuple[str, ...] = (),
    depends: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
    libraries: tuple[str, ...] = (),
) -> Extension:
    """`kinference.native.<name>` from `<unit>.c` files (default: `<name>.c` alone) and
    the headers it `depends` on, all under `kinference/native`; optional, built -O2."""
    return Extension(
        f"kinference.native.{name}",
        [f"{NATIVE}/{unit}.c" for unit in units or (name,)],
        depends=[f"{NATIVE}/{header}" for header in depends],
        optional=True,
        extra_compile_args=["-O2", *flags],
        libraries=list(libraries),
    )


setup(
    ext_modules=[
        _native("_blocks"),
        _native("_chain"),
        _native("_prefix", PREFIX_UNITS, depends=("prefix.h",)),
        _native("_scan"),
        # The pure form's values bit for bit: no fused multiply-add (aarch64 would contract
        # `a * b + c` by default); pow from libm as CPython's float ** 2.
        _native(
            "_ttft",
            TTFT_UNITS,
            depends=("ttft.h", "ttft_args.h"),
            flags=("-ffp-contract=off",),
            libraries=("m",),
        ),
    ]
)
