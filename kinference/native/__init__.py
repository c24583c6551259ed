"""Optional C extensions for the per-block loops that Python cannot make cheap.

Each is built by `setup.py` where a C compiler is found (`optional=True`: without one the
install goes on, pure Python) and each has a Python twin that is the reference and the
fallback; one function per extension chooses (`kinference.routing.prefix_store.new_store`
for `_prefix`).
"""
