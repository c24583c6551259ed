"""The routing-quality benchmark: kinference, baselines and peer routers, same engines."""
