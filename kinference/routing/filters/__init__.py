"""Filters of the routing pipeline, one module each: readiness, saturation and QoS levels,
tenant admission, provider health."""
